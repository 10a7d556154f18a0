"""Sub-commands of the ``sidecar`` command line; each module exposes ``register(subparsers)``.

``register`` adds one sub-parser and sets ``handler`` to a function taking the
parsed ``argparse.Namespace`` and returning the exit code (0 ok, 1 a check,
gate or validation failed, 2 usage or configuration error).
"""
