"""Every signature can fail: each scenario of the three matrices (scenarios/quick.yaml, nightly.yaml and
the upstream corpus), judged against a real fault-free run of its kind, must not read reproduced. A
signature that holds, or only cannot be verified, where nothing happened tests nothing.

The fault-free runs are recorded, not planted: tests/fixtures/no_fault/<kind>.yaml is a matrix scenario
without its fault, and scripts/record-no-fault-fixtures.sh keeps each real run's summary as
<kind>.json.gz (normal, ordered, transactional, timer, POP, replicated). A scenario is judged on its
own conditions and failover checks (analysis/judge/signature.py `own_evidence`), not on the run checks
(a fault never applied would fail every one alike). Controls are the other way round: a fault-free run
is what they exist to show, so theirs must hold. A corpus scenario (`expect:`) must not read reached on
any version it runs on: a fixed version's "not reproduced" must not count where the fault did nothing."""
from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from analysis.judge.expect import evaluate as expect_evaluate
from analysis.judge.signature import evaluate, own_evidence
from conftest import REPO
from pipeline.runs import load_scenario
from rmqchaos.spec import Scenario

pytestmark = pytest.mark.fast

SCENARIOS = REPO / "scenarios"
FIXTURES = REPO / "tests" / "fixtures" / "no_fault"
# the matrices' fault-free scenarios: a run where nothing happens is what each exists to show (the
# baseline every matrix carries, and the twins without their fault that a family is compared with)
CONTROLS = ("control.yaml", "grpc-control.yaml", "grpc-control-local.yaml", "shared-host-quiet.yaml",
            "link-none-retry.yaml")


def kind(s: Scenario) -> str:
    """Which fault-free run a scenario is judged against: its load's contract first, then its cluster."""
    load = s.load
    if load is not None and load.transaction is not None:
        return "transactional"
    if load is not None and load.timer is not None:
        return "timer"
    if load is not None and load.order is not None:
        return "ordered"
    if (load is not None and load.client == "grpc") or (s.consumers is not None and any(
            i.grpc is not None for i in s.consumers.instances)):
        return "pop"
    if any(b.replicas or b.slave for b in s.cluster.brokers):
        return "replicated"
    return "normal"


@cache
def fixture(k: str) -> dict[str, Any]:
    with gzip.open(FIXTURES / f"{k}.json.gz", "rt") as f:
        return json.load(f)


def matrix(name: str) -> list[str]:
    return list(dict.fromkeys(yaml.safe_load((SCENARIOS / name).read_text())["scenarios"]))


def corpus() -> list[tuple[str, list[str]]]:
    """(scenario file under scenarios/upstream/, the versions the corpus runs it on) of each corpus
    scenario with a fault. One without (a bug of plain operation: a late op record, a POP revive) has no
    fault-free twin: its run is one; its `premise` says what must have happened for it to count."""
    out = []
    for e in yaml.safe_load((SCENARIOS / "upstream" / "corpus.yaml").read_text())["entries"]:
        f, versions = (e, None) if isinstance(e, str) else (e["scenario"], e.get("versions"))
        x = load_scenario(SCENARIOS / "upstream" / f).expect
        assert x is not None, f
        if not load_scenario(SCENARIOS / "upstream" / f).faults:
            continue
        out.append((f, versions or [x.shows_on[-1], *(x.gone_in[:1] or x.measure_on)]))
    return out


def test_every_kind_has_a_recorded_fault_free_run() -> None:
    for k in ("normal", "ordered", "transactional", "timer", "pop", "replicated"):
        s = fixture(k)
        assert s["complete"] is True and s["counts"]["keys"] > 0, k
        assert not [e for e in s["events"] if e.get("kind") == "fault"], f"{k}: a fault-free run with a fault"
    assert fixture("ordered")["order"] and fixture("transactional")["transactions"] and fixture("timer")["timers"]
    assert fixture("pop")["pop"] and fixture("replicated")["failover"] is not None


@pytest.mark.parametrize("name", sorted({*matrix("quick.yaml"), *matrix("nightly.yaml")} - set(CONTROLS)))
def test_a_matrix_signature_fails_on_a_fault_free_run_of_its_kind(name: str) -> None:
    s = load_scenario(SCENARIOS / name)
    assert s.signature is not None
    k = kind(s)
    ev = own_evidence(s.signature, fixture(k))
    assert False in [e["holds"] for e in ev], (
        f"{name}'s signature does not fail on the fault-free {k} run: "
        + "; ".join(f"{e['what']} -> {e['holds']} ({e['seen']})" for e in ev))


@pytest.mark.parametrize("name", CONTROLS)
def test_a_control_holds_on_a_fault_free_run_of_its_kind(name: str) -> None:
    s = load_scenario(SCENARIOS / name)
    assert s.signature is not None and not s.faults
    r = evaluate(s.signature, fixture(kind(s)), [])
    assert r is not None and r["reached"] is True, r and r["words"]


@pytest.mark.parametrize("name, versions", corpus(), ids=[f for f, _ in corpus()])
def test_a_corpus_scenario_never_reads_reached_on_a_fault_free_run(name: str, versions: list[str]) -> None:
    s = load_scenario(SCENARIOS / "upstream" / name)
    assert s.expect is not None
    base = fixture(kind(s))
    for v in versions:
        summary = {**base, "expect": expect_evaluate(s.expect, base, [], v)}
        r = evaluate(None, summary, [(f.id, f.kind) for f in s.faults])
        assert r is not None and r["reached"] is not True, f"{name} on {v} reads reached on a fault-free run: {r['words']}"
