"""A registry's metrics exposed with extra labels on every sample (``mode="backfill"``).

``sidecar backfill`` keeps its metrics in its own registry and serves them
through :func:`labelled`, so every family it exposes (verdicts, judge calls,
spans read) carries ``mode="backfill"`` without the metric definitions
(:mod:`sidecar.adapters.prometheus`) knowing about it. The live service exposes
its registry as it is: queries that must leave backfills out select
``mode!="backfill"``, which also matches series without the label.

:func:`exposition` answers ``/metrics`` in the format the scraper asks for
(``Accept``): OpenMetrics, with exemplars, or the Prometheus text format.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as openmetrics

__all__ = ["exposition", "labelled", "wants_openmetrics"]


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


# -- content negotiation on /metrics -------------------------------------------------------

OPENMETRICS = "application/openmetrics-text"


def wants_openmetrics(accept: str) -> bool:
    """True when the scraper's ``Accept`` header asks for OpenMetrics (without ``q=0``).

    Prometheus asks for it first when exemplar storage (or
    ``scrape_protocols``) wants it; everything else keeps the Prometheus text
    format, the default.
    """
    for item in accept.split(","):
        media, *params = (part.strip() for part in item.split(";"))
        if media.lower() != OPENMETRICS:
            continue
        quality = next((p[2:] for p in params if p.lower().startswith("q=")), "1")
        try:
            if float(quality) > 0:
                return True
        except ValueError:
            continue
    return False


def exposition(registry: CollectorRegistry, accept: str = "") -> tuple[str, bytes]:
    """``registry`` as the scraper asked: (content type, body).

    Exemplars (trace and span id of a recent verdict) appear only in the
    OpenMetrics format; the Prometheus text format has no place for them.
    """
    if wants_openmetrics(accept):
        body: bytes = openmetrics.generate_latest(registry)  # type: ignore[no-untyped-call]
        return openmetrics.CONTENT_TYPE_LATEST, body
    return CONTENT_TYPE_LATEST, generate_latest(registry)
