"""Every figure name a scenario's conditions use is one the analysis computes: a name after the dot is
one of its family's (rmqchaos/spec/expect.py FAMILY_NAMES, the sets analysis/ imports), or a node,
broker group or fault id of the scenario; anything else is one line at validation naming the closest
name, never a figure that reads 0 and always holds. Pure logic: planted scenarios and summaries."""
from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from analysis.contracts import pop, transactions
from analysis.ledgers import rules
from analysis.reconcile.answers import error_counts
from analysis.judge.figures import value
from analysis.evidence.findings import busy_refusals
from analysis.evidence.log_marks import LOG_MARKS
from analysis.durability.store_check import strongest
from conftest import REPO, cli, write_scenario
from rmqchaos.errors import UserError
from rmqchaos.spec import parse_scenario
from rmqchaos.spec.checks import GROUP_FAMILIES, NODE_FAMILIES
from rmqchaos.spec.expect import (BUSY_TEXTS, DUPLICATE_CAUSES, FAMILIES, FAMILY_NAMES, OUTCOMES, POP_CAUSES, POP_CLASSES,
                                  POP_TOTALS, SEND_STATUSES, TXN_CLASSES, TXN_TOTALS)
from rmqclient.producer import STORED_STATUS

pytestmark = pytest.mark.fast

# two broker groups (nodes namesrv, broker-a, broker-b) and a fault with an id, for the per-scenario names
FAULT = {"kind": "kill", "target": "broker-a", "at": "5s", "id": "kill-a"}


def scenario(conditions: list[str], block: str = "signature") -> dict[str, Any]:
    body = ({"shows": "xyz"} if block == "signature" else {"issue": "unfiled:names", "shows_on": ["5.5.0"]})
    return {"name": "names", "load": {"duration": "30s"}, "faults": [FAULT], block: {**body, "conditions": conditions}}


def refusal(conditions: list[str], block: str = "signature") -> str:
    """The validation line for a planted scenario ('' when it validates)."""
    try:
        parse_scenario(yaml.safe_dump(scenario(conditions, block), sort_keys=False))
    except UserError as e:
        return str(e)
    return ""


def test_a_misspelt_status_is_refused_at_validation_in_one_line_naming_the_closest(tmp_path: Path) -> None:
    f = write_scenario(tmp_path / "bad.yaml", {"name": "bad", "load": {"duration": "30s"},
                                               "signature": {"shows": "xyz", "conditions": ["status.SEND_OKK == 0"]}})
    r = cli("validate", str(f))
    assert r.returncode == 1 and r.stderr.startswith(f"rmqchaos: error: {f}:"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert "signature.conditions[0]: unknown figure 'status.SEND_OKK'" in r.stderr, r.stderr
    assert "did you mean status.SEND_OK?" in r.stderr, r.stderr


@pytest.mark.parametrize("name, closest", [
    ("status.SEND_OKK", "status.SEND_OK"),
    ("outcome.timeot", "outcome.timeout"),
    ("busy.pcbusy_clean_queue", "busy.PCBUSY_CLEAN_QUEUE"),  # the broker's text is upper case
    ("duplicates.consumer_retyr", "duplicates.consumer_retry"),
    ("gone_status.FLUSH_DISK_TIMEOUTT", "gone_status.FLUSH_DISK_TIMEOUT"),
    ("transactions.rolledback_delivered", "transactions.rolled_back_delivered"),
    ("transactions.checked", "transactions.checked_after_end"),  # the one name it begins
    ("pop.consumed_but_lst", "pop.consumed_but_lost"),
    ("pop.redelivered_after_ack.after_chnage", "pop.redelivered_after_ack.after_change"),
    ("pop.by_fault.kil-a", "pop.by_fault.kill-a"),
    ("log.inactive", "log.inactive_declared"),
    ("lost_on.broker-aa", "lost_on.broker-a"),
    ("gone_on.brokr-b", "gone_on.broker-b"),
    ("route_absent_samples.brokera", "route_absent_samples.broker-a"),
    ("link_p50_added_ms.brokr-b", "link_p50_added_ms.broker-b"),
    ("order_broken_on.broker-bb", "order_broken_on.broker-b"),
    ("status.timeout", "outcome.timeout"),  # the name of another family
    ("lost_onn.broker-a", "lost_on.broker-a"),  # a misspelt family
    ("lsot", "lost"),
])
@pytest.mark.parametrize("block", ["signature", "expect"])
def test_an_unknown_name_of_each_family_is_one_line_naming_the_closest(name: str, closest: str, block: str) -> None:
    line = refusal([f"{name} > 0"], block)
    assert f"{block}.conditions[0]: " in line and f"did you mean {closest}?" in line, line
    assert "\n" not in line


@pytest.mark.parametrize("name, closest", [("status.SEND_OKK", "status.SEND_OK"), ("lost_on.brokr-a", "lost_on.broker-a")])
def test_an_unknown_name_in_the_expect_premise_is_refused_too(name: str, closest: str) -> None:
    doc = scenario(["lost == 0"], "expect")
    doc["expect"]["premise"] = [f"{name} > 0"]
    try:
        parse_scenario(yaml.safe_dump(doc, sort_keys=False))
    except UserError as e:
        assert "expect.premise[0]: " in str(e) and f"did you mean {closest}?" in str(e), str(e)
    else:
        raise AssertionError(f"{name} validated")


def test_a_name_with_nothing_close_lists_the_names() -> None:
    line = refusal(["status.NOPE_AT_ALL > 0"])
    assert "status.<name>: SEND_OK, FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE" in line, line
    assert "did you mean" not in line
    assert "no fault with id 'nope' in this scenario; fault ids: kill-a" in refusal(["pop.by_fault.nope > 0"])


@pytest.mark.parametrize("block", ["signature", "expect"])
def test_every_name_of_each_family_validates(block: str) -> None:
    names = [f"{f}.{n}" for f, ns in FAMILY_NAMES.items() for n in ns]
    names += [*(f"{f}.broker-b" for f in NODE_FAMILIES), *(f"{f}.broker-a" for f in GROUP_FAMILIES),
              "route_absent_samples.namesrv", "pop.by_fault.kill-a"]
    assert refusal([f"{n} >= 0" for n in names], block) == ""


def test_every_family_is_validated() -> None:
    # a family neither with names of its own nor checked against the scenario would take any name again
    assert set(FAMILIES) == {*FAMILY_NAMES, *NODE_FAMILIES, *GROUP_FAMILIES}


def test_the_send_statuses_outcomes_and_busy_texts_are_the_clients() -> None:
    assert set(STORED_STATUS.values()) == set(SEND_STATUSES) == set(rules.STORED_STATUSES)
    java = (REPO / "java/src/main/java/io/rmqchaos/GrpcProducer.java").read_text()
    assert set(re.findall(r'\\"status\\":\\"(\w+)', java)) <= set(SEND_STATUSES)
    busy = re.search(r"Pattern BUSY = Pattern.compile\((.*?)\);", java, re.S)
    assert busy and set(re.findall(r"[A-Z][A-Z_]+[A-Z]", busy.group(1))) == set(BUSY_TEXTS)
    assert rules.BUSY_PREFIXES == tuple(f"[{t}]" for t in BUSY_TEXTS)
    # every outcome a producer writes (rmqclient's SendResult, the gRPC producer's journal), and no_outcome
    py = (REPO / "rmqclient/producer.py").read_text()
    written = {*re.findall(r'outcome="(\w+)"', py), *re.findall(r'res\.outcome, [^=\n]*= "(\w+)"', py),
               *re.findall(r'\\"outcome\\":\\"(\w+)', java), *re.findall(r'timeout \? "(\w+)" : "(\w+)"', java)[0]}
    assert written == {"ok", "error", "timeout"}
    assert {*written, *error_counts([], 3)["by_outcome"]} == set(OUTCOMES)


def test_the_busy_kinds_the_analysis_counts_are_the_texts() -> None:
    s = {"counts": {"attempts": 100}, "answers": [{"answer": p, "attempts": 1} for p in rules.BUSY_PREFIXES]}
    assert set(busy_refusals(s)["by_kind"]) == set(BUSY_TEXTS)


def test_the_causes_classes_and_statuses_the_analysis_emits_are_the_names() -> None:
    assert rules.DUPLICATE_CAUSES is DUPLICATE_CAUSES and transactions.CLASSES is TXN_CLASSES
    assert pop.CLASSES is POP_CLASSES and pop.CAUSES is POP_CAUSES and set(POP_CAUSES) == set(POP_CLASSES)
    assert tuple(LOG_MARKS) == FAMILY_NAMES["log"]
    # gone_status: the strongest status a key was acknowledged with, `unknown` without one
    assert {strongest([]), *(strongest([x, "FLUSH_SLAVE_TIMEOUT"]) for x in SEND_STATUSES)} <= set(FAMILY_NAMES["gone_status"])
    # the labels the Spark expressions give a half message and a POP delivery
    assert _labels(transactions.transaction_check, "cls") | {"discarded"} == set(TXN_CLASSES)
    assert _labels(pop.pop_check, "cls") == set(POP_CLASSES)
    assert _labels(pop.pop_check, "cause") | _labels(pop.pop_check, "why") == {c for cs in POP_CAUSES.values() for c in cs}
    # the totals beside them
    assert set(TXN_TOTALS) <= set(re.findall(r'"(\w+)": int\(row', inspect.getsource(transactions.transaction_check)))
    assert set(POP_TOTALS) == set(re.findall(r'"(\w+)": int\(tot', inspect.getsource(pop.pop_check)))


def _labels(fn: Callable[..., Any], var: str) -> set[str]:
    """The strings an F.when(cond, "x") / .otherwise("x") chain assigned to `var` in `fn` yields."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(inspect.getsource(fn))):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == var for t in node.targets):
            for call in ast.walk(node.value):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in ("when", "otherwise"):
                    label = call.args[-1]  # a nested F.when(...) is walked as a call of its own
                    out |= {c.value for c in ast.walk(label) if isinstance(c, ast.Constant) and isinstance(c.value, str)
                            } if isinstance(label, (ast.Constant, ast.IfExp)) else set()
    return out


def test_each_name_reads_its_own_count_never_a_zero_by_default() -> None:
    """The evaluator reads every name where the analysis put it: each planted with its own count."""
    names = [(f, n) for f, ns in FAMILY_NAMES.items() if f != "log" for n in ns]
    count = {name: i + 1 for i, name in enumerate(names)}
    s: dict[str, Any] = {
        "counts": {"attempts": 10_000},
        "errors": {"by_status": {n: count["status", n] for n in SEND_STATUSES},
                   "by_outcome": {n: count["outcome", n] for n in OUTCOMES}},
        "answers": [{"answer": f"[{n}]", "attempts": count["busy", n]} for n in BUSY_TEXTS],
        "duplicates_by_cause": {n: count["duplicates", n] for n in DUPLICATE_CAUSES},
        "store_check": {"gone_by_status": {n: count["gone_status", n] for n in FAMILY_NAMES["gone_status"]}},
        "transactions": {"classes": {n: count["transactions", n] for n in TXN_CLASSES},
                         **{n: count["transactions", n] for n in TXN_TOTALS}},
        "pop": {**{n: count["pop", n] for n in POP_TOTALS}, "classes": {c: count["pop", c] for c in POP_CLASSES},
                "causes": {c: {x: count["pop", f"{c}.{x}"] for x in POP_CAUSES[c]} for c in POP_CLASSES}},
    }
    assert {(f, n): value(s, f"{f}.{n}") for f, n in names} == count
