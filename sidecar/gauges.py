"""Removing a gauge's series so that it stays removed with ``sidecar run --workers``."""

from __future__ import annotations

from typing import Protocol


class Settable(Protocol):
    def set(self, value: float) -> None: ...


class Removable(Protocol):
    # Label values positionally, in the family's label order (as ``remove`` takes them).
    def labels(self, *labelvalues: str) -> Settable: ...

    def remove(self, *labelvalues: str) -> None: ...


def retire(gauge: Removable, *labels: str, last: float = 0.0) -> None:
    """Remove a gauge's series.

    With ``--workers`` each worker's values live in a file that a removal does
    not reach, so the series is first set to ``last``: 0 for gauges summed
    over workers (lag, queue depth), NaN for the rest (NaN compares false, so
    a retired series never fires an alert).
    """
    gauge.labels(*labels).set(last)
    gauge.remove(*labels)
