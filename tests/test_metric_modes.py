"""Every gauge declares how ``sidecar run --workers N`` combines it over the workers.

prometheus-client's default multiprocess mode for a gauge (``all``) keeps one
series per worker pid, exited workers included; a gauge that forgot its mode
would show a dead worker's open traces or lag for ever. So each gauge names a
``live*`` mode: the families read at scrape time and the ones ``Metrics`` owns.
"""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Gauge

from sidecar.adapters.prometheus import GAUGE_MODES, STAT_FAMILIES, Metrics, StatFamily


def test_every_gauge_read_at_scrape_time_declares_a_live_mode() -> None:
    gauges = [f for f in STAT_FAMILIES if f.kind == "gauge"]
    assert len(gauges) >= 8  # open traces, lag, queue depth, the conversation gauges...
    assert {f.name for f in gauges} >= {
        "sidecar_open_conversations",
        "sidecar_open_conversations_limit",
        "sidecar_conversation_held_turns",
        "sidecar_conversation_state_conversations",
    }
    assert all(f.mode in GAUGE_MODES for f in gauges)


def test_a_gauge_family_without_a_mode_is_refused_when_it_is_declared() -> None:
    with pytest.raises(ValueError, match="sidecar_new_gauge must declare how --workers combine"):
        StatFamily("sidecar_new_gauge", "A gauge someone adds.", "gauge")
    StatFamily("sidecar_new_total", "Counters are summed.", "counter")


def test_every_gauge_metrics_owns_declares_a_live_mode() -> None:
    metrics = Metrics(CollectorRegistry())
    gauges = {name: g for name, g in vars(metrics).items() if isinstance(g, Gauge)}
    assert len(gauges) >= 5
    modes = {name: g._multiprocess_mode for name, g in gauges.items()}
    assert {name: m for name, m in modes.items() if m not in GAUGE_MODES} == {}
