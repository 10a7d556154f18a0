"""The exception tree of sidecar.

    SidecarError                 base of everything raised on purpose
    ├── UsageError               a command cannot use what it was given (exit code 2)
    │   ├── ConfigError          bad settings file or environment
    │   ├── RubricError          a rubric file is invalid (names file and field)
    │   ├── InputFileError       an input file cannot be read or written, or holds nothing
    │   └── RecordError          a record does not match its format (names file:line or topic)
    ├── SourceError              Kafka cannot be reached at start-up (exit code 1)
    ├── DeliveryError            the broker did not acknowledge a record; the service retries
    │   └── PartialDelivery      some records of a batch were not acknowledged (which ones)
    ├── DecodeError              a record is not OTLP; goes to the dead-letter topic
    └── JudgeError               the judge could not give a verdict
        └── JudgeUnavailable     transport failure after retries, or breaker open

Exit codes are mapped once, in :func:`sidecar.cli.exit_code`. Adapters wrap
third-party errors in these classes with ``raise ... from exc`` so the cause
stays visible.
"""

from __future__ import annotations

from collections.abc import Sequence


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


class DeliveryError(SidecarError):
    """A record was not acknowledged by the broker; the sender retries, the offsets stay held."""


class PartialDelivery(DeliveryError):
    """Some records of a batch were not acknowledged: ``unsent`` are their indices in the batch."""

    def __init__(self, message: str, unsent: Sequence[int]) -> None:
        super().__init__(message)
        self.unsent = tuple(unsent)


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
