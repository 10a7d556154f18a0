"""Sub-commands of the ``sidecar`` command line; each module exposes ``register(subparsers)``.

``register`` adds one sub-parser and sets ``handler`` to a function taking the
parsed ``argparse.Namespace`` and returning the exit code: 0 ok, 1 a check,
gate or validation failed. Errors are raised (:mod:`sidecar.errors`) and
turned into exit codes by :mod:`sidecar.cli`; a command whose messages carry
its own name sets ``error_prefix`` too. File and console helpers shared by
commands are in the private :mod:`sidecar.commands._io`; commands do not
import each other.
"""
