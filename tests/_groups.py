"""Which tests may run at the same time: `make test` runs the real tier on two pytest-xdist workers
(`--dist loadgroup`), and two tests that would start servers on the same port, share a session
cluster or the docker engine must not overlap.

Each test module's resources are read from its source, less the test functions not in this run (the
fast tier's, the long ones'): the port-like numbers in it (9000-32767, not round thousands, which are
durations in ms), else (a module that names no port runs scenario files as they are: this suite's
tests that name ports put them over any file they extend) the ports of the scenario files it names,
through their `extends:` (a file with no port takes the defaults); and the shared fixtures its tests use.
Modules that share a resource form one group (union-find), which one worker runs whole; over-merging
only costs parallelism. Groups go out longest first, so the last group to start is a short one: by
the durations of the newest recorded session (.cache/test-runs/), else of tests/durations.json (a
record committed as a scheduling hint: `python tests/_outcomes.py --durations FILE > tests/durations.json`;
a test it lacks counts REAL_TEST_S)."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Iterable

import pytest

from conftest import CLUSTER_PORTS

REPO = Path(__file__).resolve().parent.parent
#: the ports of conftest.py's clusters, so a module naming one of them joins their users
FIXTURE_PORTS = {f: {str(ns), *map(str, brokers)} for f, (ns, brokers) in CLUSTER_PORTS.items()}
#: one of each per machine: the dockerd a module starts (its socket and data root), the DAG tests' Airflow port
EXCLUSIVE_FIXTURES = {"engine": "docker-engine", "airflow_home": "airflow"}
DEFAULT_PORTS = {"9876", "10909", "10911", "10912"}
_PORT = re.compile(r"(?<![\d.])(9\d{3}|[12]\d{4}|3[0-2]\d{3})(?![\d.])")
_SCENARIO = re.compile(r"""scenarios(?:/|["']\s*/\s*["'])([\w.-]+(?:/[\w.-]+)*\.ya?ml)""")
_EXTENDS = re.compile(r"^extends:\s*['\"]?([^'\"\s]+)", re.M)
REAL_TEST_S = 20.0  # a real test's duration when no session recorded it


def ports_in(text: str) -> set[str]:
    return {p for p in _PORT.findall(text) if not p.endswith("000")}


def scenario_ports(path: Path, seen: set[Path] | None = None) -> set[str]:
    """The ports a scenario file names, through its `extends:` chain; none named: the defaults."""
    seen = seen if seen is not None else set()
    if path in seen or not path.is_file():
        return set()
    seen.add(path)
    text = path.read_text()
    out = ports_in(text)
    for base in _EXTENDS.findall(text):
        out |= scenario_ports((path.parent / base).resolve(), seen)
    return out or set(DEFAULT_PORTS)


def module_resources(source: str, fixtures: Iterable[str]) -> set[str]:
    res = {f"port:{p}" for p in ports_in(source)}
    for name in _SCENARIO.findall(source) if not res else []:
        res |= {f"port:{p}" for p in scenario_ports(REPO / "scenarios" / name)}
    for f in fixtures:
        res |= {f"port:{p}" for p in FIXTURE_PORTS.get(f, ())}
        if f in EXCLUSIVE_FIXTURES:
            res.add(EXCLUSIVE_FIXTURES[f])
    return res


def source_of(text: str, tree: ast.Module, running: set[str]) -> str:
    """The module's source (`text`, parsed: `tree`) without the test functions not in `running` (their names)."""
    lines = text.splitlines()
    drop: list[tuple[int, int]] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_") and node.name not in running:
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            drop.append((start - 1, node.end_lineno or node.lineno))
    for a, b in reversed(drop):
        del lines[a:b]
    return "\n".join(lines)


def components(resources: dict[str, set[str]]) -> dict[str, str]:
    """module -> its group's name (the group's first module): modules sharing a resource, transitively."""
    parent = {m: m for m in resources}

    def root(m: str) -> str:
        while parent[m] != m:
            parent[m] = parent[parent[m]]
            m = parent[m]
        return m
    owner: dict[str, str] = {}
    for m in sorted(resources):
        for r in resources[m]:
            if r in owner:
                a, b = sorted((root(m), root(owner[r])))
                parent[b] = a
            else:
                owner[r] = m
    return {m: root(m) for m in resources}


def recorded_durations() -> dict[str, float]:
    """nodeid -> seconds, from the newest session file that recorded real tests (tests/_outcomes.py),
    else from tests/durations.json."""
    for f in sorted((REPO / ".cache" / "test-runs").rglob("*.json"), key=lambda f: f.name, reverse=True):
        try:
            tests = json.loads(f.read_text()).get("tests") or {}
        except (OSError, ValueError):
            continue
        real = {k: float(v.get("duration_s") or 0) for k, v in tests.items()
                if "fast" not in (v.get("markers") or [])}
        if len(real) >= 20:
            return real
    hint = Path(__file__).with_name("durations.json")
    return json.loads(hint.read_text()) if hint.is_file() else {}


def _fixtures(tree: ast.Module, tests: set[str]) -> set[str]:
    """The arguments of the running test functions and of the module's own fixtures (which may use
    a shared one): over-merging only costs parallelism."""
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and (node.name in tests or any(
                "fixture" in ast.unparse(d) for d in node.decorator_list)):
            out |= {a.arg for a in node.args.args}
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
            for args in re.findall(r"usefixtures\(([^)]*)\)", ast.unparse(node.value)):
                out |= {x.strip(" '\"") for x in args.split(",")}
    return out


def groups(nodeids: Iterable[str], root: Path = REPO) -> dict[str, str]:
    """nodeid -> its group's name, for the tests of one run (node ids as pytest gives them)."""
    tests: dict[str, set[str]] = {}
    for n in nodeids:
        path, _, name = n.partition("::")
        tests.setdefault(path, set()).add(name.split("[")[0].split("::")[-1])
    resources = {}
    for path, names in tests.items():
        text = (root / path).read_text()
        tree = ast.parse(text)
        resources[path] = module_resources(source_of(text, tree, names), _fixtures(tree, names))
    group = components(resources)
    return {n: Path(group[n.partition("::")[0]]).stem for n in nodeids}


def estimates(group: dict[str, str]) -> dict[str, float]:
    """group -> its tests' seconds (recorded_durations, else REAL_TEST_S each), of `groups()`'s answer."""
    known = recorded_durations()
    out: dict[str, float] = {}
    for n, g in group.items():
        out[g] = out.get(g, 0.0) + known.get(n, REAL_TEST_S)
    return out


def longest_first(items: list[pytest.Item]) -> None:
    """Put the real tests in their groups' order, longest group first (the scheduler below sends the
    groups in the order it first sees them); the fast tier stays first."""
    real = [it.nodeid for it in items if it.get_closest_marker("fast") is None]
    g = groups(real)
    est = estimates(g)
    first = {id(it): i for i, it in enumerate(items)}
    items.sort(key=lambda it: (it.nodeid in g, -est.get(g.get(it.nodeid, ""), 0.0), g.get(it.nodeid, ""),
                               first[id(it)]))


def scheduler(config: pytest.Config, log: object) -> object:
    """xdist's scope scheduling with our groups as the scopes, in collection order (longest_first)."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        _group: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._group is None:
                self._group = groups(self.collection or [nodeid])
            return self._group.get(nodeid) or nodeid

    config.option.loadscopereorder = False
    return GroupScheduling(config, log)
