"""Exemplars: the trace and span id of a recent verdict beside the verdict metrics.

Each verdict's counters (``sidecar_cases_total``, ``sidecar_check_results_total``,
``sidecar_criterion_verdicts_total``) and its latency observation
(``sidecar_verdict_latency_seconds``) carry an exemplar with two labels,
``trace_id`` (32 hex digits, the evaluated trace) and ``span_id`` (16 hex
digits, the verdict span; absent when no span was recorded): 63 characters,
under OpenMetrics' 128. Each series shows its latest one. Exemplars are
exposed only in the OpenMetrics format (:func:`sidecar.adapters.exposition.exposition`).

With ``--workers``, prometheus-client's multiprocess files hold no exemplars
(its multiprocess values drop them), so each worker also keeps the latest
exemplar per series in an :class:`ExemplarMemory` and writes it beside its
metric files (``exemplars_<pid>.json``, by ``StatsBridge`` every second);
the supervisor's :class:`MergedExemplars` puts the newest exemplar of every
series over all workers onto the summed samples.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Exemplar
from prometheus_client.utils import floatToGoString

log = logging.getLogger(__name__)

FILE_PREFIX = "exemplars_"
# Series remembered per process; past it the memory starts again (the next verdicts refill it).
MAX_SERIES = 10_000

Key = tuple[str, tuple[tuple[str, str], ...]]


def verdict_exemplar(trace_id: str, span_id: str | None) -> dict[str, str]:
    """The exemplar labels of one verdict (see the module docstring)."""
    labels = {"trace_id": trace_id}
    if span_id:
        labels["span_id"] = span_id
    return labels


def bucket_bound(value: float, buckets: Sequence[float]) -> str:
    """The ``le`` label of the histogram bucket ``value`` is counted in first."""
    for bound in buckets:
        if value <= bound:
            return str(floatToGoString(bound))  # type: ignore[no-untyped-call]
    return "+Inf"


class ExemplarMemory:
    """The latest exemplar of each sample series, to be written to a file (``--workers``)."""

    def __init__(self, max_series: int = MAX_SERIES) -> None:
        self.max_series = max_series
        self._latest: dict[Key, tuple[dict[str, str], float, float]] = {}
        # Whether an exemplar came since the file was last written.
        self.changed = False

    def remember(
        self,
        sample: str,
        labels: Mapping[str, str],
        exemplar: dict[str, str],
        value: float,
        timestamp: float,
    ) -> None:
        key = (sample, tuple(sorted(labels.items())))
        if key not in self._latest and len(self._latest) >= self.max_series:
            self._latest.clear()
        self._latest[key] = (exemplar, value, timestamp)
        self.changed = True

    def __len__(self) -> int:
        return len(self._latest)

    def dump(self) -> str:
        return json.dumps(
            [
                [name, dict(labels), exemplar, value, timestamp]
                for (name, labels), (exemplar, value, timestamp) in self._latest.items()
            ]
        )

    def write(self, directory: Path, pid: int | None = None) -> None:
        """Replace this process's exemplar file in ``directory`` (atomically)."""
        path = directory / f"{FILE_PREFIX}{os.getpid() if pid is None else pid}.json"
        scratch = path.with_suffix(".tmp")
        scratch.write_text(self.dump(), encoding="utf-8")
        scratch.replace(path)
        self.changed = False


def read_exemplars(directory: Path) -> dict[Key, Exemplar]:
    """The newest exemplar of each series over every process's file in ``directory``."""
    newest: dict[Key, Exemplar] = {}
    for path in sorted(directory.glob(f"{FILE_PREFIX}*.json")):
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            # A file being replaced or cut short: its exemplars are back at the next write.
            continue
        for name, labels, exemplar, value, timestamp in rows:
            key = (name, tuple(sorted(labels.items())))
            found = newest.get(key)
            if found is None or (found.timestamp or 0.0) < timestamp:
                newest[key] = Exemplar(exemplar, value, timestamp)
    return newest


class _Collector(Protocol):
    def collect(self) -> Iterator[Metric]: ...


class MergedExemplars:
    """A collector: ``inner``'s families with the workers' exemplars put on their samples."""

    def __init__(self, inner: _Collector, directory: Path) -> None:
        self._inner = inner
        self._directory = directory

    def collect(self) -> Iterator[Metric]:
        exemplars = read_exemplars(self._directory)
        for family in self._inner.collect():
            if exemplars:
                family.samples = [
                    sample._replace(
                        exemplar=exemplars.get(
                            (sample.name, tuple(sorted(sample.labels.items()))), sample.exemplar
                        )
                    )
                    for sample in family.samples
                ]
            yield family
