"""A registry's metrics exposed with extra labels on every sample (``mode="backfill"``).

``sidecar backfill`` keeps its metrics in its own registry and serves them
through :func:`labelled`, so every family it exposes (verdicts, judge calls,
spans read) carries ``mode="backfill"`` without the metric definitions
(:mod:`sidecar.adapters.prometheus`) knowing about it. The live service exposes
its registry as it is: queries that must leave backfills out select
``mode!="backfill"``, which also matches series without the label.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

__all__ = ["labelled"]


class _Labelled:
    def __init__(self, registry: CollectorRegistry, labels: Mapping[str, str]) -> None:
        self._registry = registry
        self._labels = dict(labels)

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            copy = Metric(family.name, family.documentation, family.type, family.unit)
            copy.samples = [
                sample._replace(labels={**self._labels, **sample.labels})
                for sample in family.samples
            ]
            yield copy


def labelled(registry: CollectorRegistry, **labels: str) -> CollectorRegistry:
    """A registry that exposes ``registry``'s samples with ``labels`` added (theirs win)."""
    view = CollectorRegistry(auto_describe=False)
    view.register(_Labelled(registry, labels))
    return view
