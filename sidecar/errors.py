"""The exception tree of sidecar.

    SidecarError                 base of everything raised on purpose
    ├── UsageError               a command cannot use what it was given (exit code 2)
    │   ├── ConfigError          bad settings file or environment
    │   ├── RubricError          a rubric file is invalid (names file and field)
    │   ├── InputFileError       an input file cannot be read or written, or holds nothing
    │   └── RecordError          a record does not match its format (names file:line or topic)
    ├── SourceError              Kafka cannot be reached at start-up (exit code 1)
    ├── DeliveryError            the broker did not acknowledge records; each ``Refusal`` says
    │                            whether trying again can help (the deliverer retries those)
    ├── DecodeError              a record is not OTLP; goes to the dead-letter topic
    └── JudgeError               the judge could not give a verdict
        └── JudgeUnavailable     transport failure after retries, or breaker open

Exit codes are mapped once, in :func:`sidecar.cli.exit_code`. Adapters wrap
third-party errors in these classes with ``raise ... from exc`` so the cause
stays visible.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


class SidecarError(Exception):
    """Base class of all errors sidecar raises on purpose."""


class UsageError(SidecarError):
    """A command was given an argument or input it cannot use; the message says which."""


class ConfigError(UsageError):
    """The configuration is invalid; the message says which field and why."""


class RubricError(UsageError):
    """A rubric file is invalid; the message names the file and the field."""


class InputFileError(UsageError):
    """An input file cannot be read or written, or holds no records; the message names it."""


class RecordError(UsageError):
    """A record (a JSON line, a Kafka message) does not match its format.

    The message starts with where the record came from (``file:line``, or the
    topic) when that is known, then names the field.
    """


class SourceError(SidecarError):
    """The message broker cannot be reached or refused us; the message says what to check."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why the broker refused one record.

    ``retriable``: trying again can succeed without anyone acting (a broker
    restarting, a leader moving, a timeout); otherwise the record can never
    be written as it is (too large, invalid) or not until an operator acts
    (``not_authorized``, ``unknown_topic``). ``reason`` is a short closed
    label; ``detail`` the client's words.
    """

    retriable: bool
    reason: str
    detail: str = ""


class DeliveryError(SidecarError):
    """Records were not acknowledged by the broker.

    ``refused`` maps the position of each refused record in the batch sent to
    its :class:`Refusal`; None means every record of the batch, retriably.
    """

    def __init__(self, message: str, refused: Mapping[int, Refusal] | None = None) -> None:
        super().__init__(message)
        self.refused = dict(refused) if refused is not None else None

    def refusals(self, count: int) -> dict[int, Refusal]:
        """Each refused position of a batch of ``count`` records, with why."""
        if self.refused is not None:
            return self.refused
        everyone = Refusal(True, "unavailable", str(self))
        return dict.fromkeys(range(count), everyone)


class DecodeError(SidecarError):
    """A record could not be decoded as OTLP; ``reason`` is a short closed label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class JudgeError(SidecarError):
    """The judge could not produce a verdict; ``reason`` is a closed label for metrics."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class JudgeUnavailable(JudgeError):
    """Transport failure after retries, or the circuit breaker is open."""
