"""The exception tree of sidecar.

    SidecarError                 base of everything raised on purpose
    ├── ConfigError              bad settings file or environment (exit code 2)
    ├── RubricError              a rubric file is invalid (names file and field)
    ├── SourceError              Kafka cannot be reached at start-up (exit code 1)
    ├── DeliveryError            the broker did not acknowledge a record; the service retries
    ├── DecodeError              a record is not OTLP; goes to the dead-letter topic
    └── JudgeError               the judge could not give a verdict
        ├── JudgeUnavailable     transport failure after retries, or breaker open
        └── JudgeOutputError     the model answered but not in the agreed shape

Low-level errors are wrapped with ``raise ... from exc`` so the cause stays visible.
"""

from __future__ import annotations


class SidecarError(Exception):
    """Base class of all errors sidecar raises on purpose."""


class ConfigError(SidecarError):
    """The configuration is invalid; the message says which field and why."""


class RubricError(SidecarError):
    """A rubric file is invalid; the message names the file and the field."""


class SourceError(SidecarError):
    """The message broker cannot be reached or refused us; the message says what to check."""


class DeliveryError(SidecarError):
    """A record was not acknowledged by the broker; the sender retries, the offsets stay held."""


class DecodeError(SidecarError):
    """A record could not be decoded as OTLP; ``reason`` is a short closed label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class JudgeError(SidecarError):
    """The judge could not produce a verdict; ``reason`` is a closed label for metrics."""

    retriable = False

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class JudgeUnavailable(JudgeError):
    retriable = True


class JudgeOutputError(JudgeError):
    pass
