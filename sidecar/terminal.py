"""Untrusted values on a terminal: shown as text, never read as markup or control codes.

The offline commands print with rich, which reads ``[bold]``-style markup in
every string it is given and passes escape sequences through to the terminal.
Agent versions, criterion names, rubric ids and file contents are untrusted,
so whatever holds them is printed as a :class:`rich.text.Text` made here:
:func:`plain` escapes control characters the way the log does
(:func:`sidecar.logs.shown`) and is never parsed as markup; :func:`styled`
and :func:`warning_line` add the commands' own colours around such text.
"""

from __future__ import annotations

from rich.text import Text

from sidecar.logs import shown


def plain(value: object) -> Text:
    """``value`` as literal text, control characters shown as escapes."""
    return Text(shown(str(value)))


def styled(value: object, style: str) -> Text:
    """``value`` as literal text in ``style``."""
    return Text(shown(str(value)), style=style)


def warning_line(message: object) -> Text:
    """``warning: MESSAGE`` with the label in yellow and the message literal."""
    return Text.assemble(("warning:", "yellow"), " ", shown(str(message)))


def yes_no(ok: bool) -> Text:
    """A green ``yes`` or a red ``no`` (the ``ok`` and ``fit`` columns)."""
    return styled("yes", "green") if ok else styled("no", "red")
