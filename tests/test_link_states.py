"""The links the monitor probes (cluster/net/roundtrip.py `fault_links`) from a scenario's network faults,
and what the analysis makes of the probes (analysis/evidence/links.py, the report's links plot), from
synthetic monitor samples. The probes on a real cut: test_partition.py."""
from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from analysis.evidence.links import link_series, without_links
from analysis.report.plots import plot_links
from cluster.net.roundtrip import fault_links
from rmqchaos.spec import Scenario
from tests.conftest import REPO

pytestmark = pytest.mark.fast


def scenario(*faults: dict[str, Any], consumers: bool = False) -> Scenario:
    return Scenario.model_validate({"name": "l", "load": {"duration": "10s"}, "faults": list(faults),
                                    **({"consumers": {"instances": [{"id": "c1"}, {"id": "c2"}]}} if consumers else {})})


def test_the_monitor_probes_the_links_each_network_fault_names_from_the_side_that_connects() -> None:
    assert fault_links(scenario()) == []
    assert fault_links(scenario({"kind": "oom_kill", "target": "broker-a", "at": "1s"})) == []
    part = fault_links(scenario({"kind": "partition", "at": "1s", "groups": [["broker-a", "producers"], ["namesrv"]]}))
    # both nodes listen: probed both ways; producers listen on nothing: only its connections to namesrv
    assert [(ln.key, ln.client, ln.server, ln.port) for ln in part] == [
        ("broker-a -> namesrv", "127.0.10.11", "127.0.10.1", 9876),
        ("producers -> namesrv", "127.0.10.201", "127.0.10.1", 9876),
        ("namesrv -> broker-a", "127.0.10.1", "127.0.10.11", 10911)]
    s = scenario({"kind": "link", "at": "1s", "from": "consumers", "to": "broker-b", "latency": "200ms"},
                 {"kind": "link", "at": "5s", "from": "consumers", "to": "broker-b", "blackhole": True},  # once
                 {"kind": "link", "at": "9s", "from": "broker-a", "to": "namesrv", "both": True, "reset": True},
                 consumers=True)
    assert [ln.key for ln in fault_links(s)] == ["consumer-c1 -> broker-b", "consumer-c2 -> broker-b",
                                                 "broker-a -> namesrv", "namesrv -> broker-a"]
    assert all(ln.client.startswith("127.") and ln.server.startswith("127.") for ln in fault_links(s))


def samples(rtts: dict[str, list[float | None]]) -> list[dict[str, Any]]:
    n = len(next(iter(rtts.values())))
    return [{"ts_ms": 1_000_000 + 1000 * i, "brokers": {}, "links": {k: v[i] for k, v in rtts.items()}}
            for i in range(n)]


def test_the_summary_keeps_each_links_round_trips_and_its_stretches_without_an_answer() -> None:
    mon = [{"ts_ms": 999_000, "error": "x"}, *samples({"a -> b": [0.3, None, None, 0.4, 150.0, None],
                                                        "b -> a": [0.2, 0.2, 0.3, 0.2, 0.2, 0.2]})]
    ls = link_series(mon)
    assert ls is not None and ls["t_ms"] == [1_000_000 + 1000 * i for i in range(6)]
    a = ls["links"]["a -> b"]
    assert a["no_answer"] == [[1_001_000, 1_003_000], [1_005_000, 1_006_000]]  # the last one past its sample
    assert (a["no_answer_s"], a["slow_s"], a["median_ms"]) == (3, 1, 0.4)
    assert ls["links"]["b -> a"]["no_answer"] == [] and ls["links"]["b -> a"]["no_answer_s"] == 0
    assert link_series([{"ts_ms": 1, "brokers": {}}]) is None  # no network fault: no probes, no links
    assert "links" not in without_links(mon[1]) and without_links(mon[1])["ts_ms"] == mon[1]["ts_ms"]
    import json
    schema = json.loads((REPO / "analysis" / "summary.schema.json").read_text())["properties"]["links"]
    jsonschema.validate(ls, schema)
    jsonschema.validate(None, schema)


def test_the_links_plot_has_a_row_per_link_coloured_by_state_with_the_fault_shaded() -> None:
    ls = link_series(samples({"broker-a -> namesrv": [0.3, None, None, 0.4, 150.0],
                              "namesrv -> broker-a": [0.2, None, None, 0.2, 0.2]}))
    s = {"series": [{"t": 1000}], "links": ls,
         "windows": [{"id": "cut", "kind": "fault", "start_ms": 1_001_000, "end_ms": 1_003_000}]}
    svg = plot_links(s)
    assert svg.startswith("<svg") and "Links (probed by the monitor)" in svg
    assert "broker-a -&gt; namesrv (median 0.4 ms)" in svg and "namesrv -&gt; broker-a (median 0.2 ms)" in svg
    for color in ("#4caf50", "#ff9800", "#d32f2f", "#ffcdd2"):  # answered, slow, no answer, the fault's shade
        assert color in svg, color
    assert "<!-- cut -->" in svg  # the window's label
