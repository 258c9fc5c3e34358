"""The scenario spec: one typed YAML document that drives a whole run.

Validated on load. Every error names the file, the line, the dotted key and what is allowed;
unknown keys are errors (a misspelt key silently ignored would make a run test something else).
Later stages add sections (load, consumers, faults, noise, gates) as new fields of `Scenario`.
"""
from __future__ import annotations

import math

import difflib
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping, Protocol, Union

import yaml
from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictFloat, StrictInt,
                      ValidationError, model_validator)

from rmqchaos import paths
from rmqchaos.errors import UserError

# ---------------------------------------------------------------- value types

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def _duration(v: Any) -> Any:
    """'500ms', '30s', '2m', '1h' or a bare number of seconds -> float seconds."""
    if isinstance(v, bool):
        raise ValueError("expected a duration such as 30s, 500ms or 2m")
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        m = _DURATION.match(v)
        if not m:
            if v.strip().startswith("-"):
                raise ValueError(f"duration must not be negative (got {v!r})")
            raise ValueError(f"expected a duration such as 30s, 500ms or 2m (got {v!r})")
        return float(m.group(1)) * _UNIT[m.group(2)]
    raise ValueError("expected a duration such as 30s, 500ms or 2m")


Duration = Annotated[float, BeforeValidator(_duration), Field(gt=0)]
Port = Annotated[StrictInt, Field(ge=1024, le=65535)]
ConfValue = Union[StrictBool, StrictInt, StrictFloat, str]
NodeName = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,40}$")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


# ---------------------------------------------------------------- cluster


class Jvm(Strict):
    heap_mb: Annotated[StrictInt, Field(ge=32, le=16384)]
    max_direct_memory_mb: Annotated[StrictInt, Field(ge=16, le=65536)] | None = None
    options: list[str] = []
    system_properties: dict[str, ConfValue] = {}


class Namesrv(Strict):
    port: Port = 9876
    jvm: Jvm = Jvm(heap_mb=128)
    config: dict[str, ConfValue] = {}


class BrokerDefaults(Strict):
    """Applied to every broker; a broker's own `jvm` replaces it, its `config` keys override it."""
    jvm: Jvm = Jvm(heap_mb=512, max_direct_memory_mb=512)
    config: dict[str, ConfValue] = {}


class Slave(Strict):
    port: Port | None = None  # default: the master's port + 5


class Broker(Strict):
    name: NodeName
    port: Port | None = None  # default: 10911 + 10 * index; also uses port-2 (fast) and port+1 (HA)
    jvm: Jvm | None = None
    config: dict[str, ConfValue] = {}
    slave: Slave | None = None


class Proxy(Strict):
    enabled: bool = False
    grpc_port: Port = 8081
    remoting_port: Port = 8080
    jvm: Jvm = Jvm(heap_mb=256)


def _default_brokers() -> list[Broker]:
    return [Broker(name="broker-a"), Broker(name="broker-b")]


def _loopback_subnet(v: Any) -> str:
    import ipaddress
    try:
        net = ipaddress.IPv4Network(str(v), strict=True)
    except ValueError as e:
        raise ValueError(f"not an IPv4 subnet: {e}") from None
    if not net.subnet_of(ipaddress.IPv4Network("127.0.0.0/8")) or net.prefixlen != 24 or str(net) == "127.0.0.0/24":
        raise ValueError("must be a /24 inside 127.0.0.0/8 other than 127.0.0.0/24 (e.g. 127.0.10.0/24)")
    return str(net)


class Cluster(Strict):
    backend: Literal["local", "docker"] = "local"  # docker: `rmqchaos image build` + an engine
    rocketmq_version: str = Field(default_factory=paths.pinned_rocketmq_version)
    name: NodeName = "DefaultCluster"
    namesrv: Namesrv = Namesrv()
    broker_defaults: BrokerDefaults = BrokerDefaults()
    brokers: Annotated[list[Broker], Field(min_length=1, max_length=8)] = Field(default_factory=_default_brokers)
    proxy: Proxy = Proxy()
    ready_timeout: Duration = 120.0
    stop_timeout: Duration = 20.0  # SIGTERM grace: a broker's shutdown hooks take ~5-15 s here
    # Every node and client listens on and connects from its own address in this loopback /24
    # (cluster/plan.py `addresses`), so that every link is an address pair a partition can name.
    subnet: Annotated[str, BeforeValidator(lambda v: _loopback_subnet(v))] = "127.0.10.0/24"

    @model_validator(mode="after")
    def _assign_ports(self) -> "Cluster":
        for i, b in enumerate(self.brokers):
            if b.port is None:
                b.port = 10911 + 10 * i
            if b.slave is not None and b.slave.port is None:
                b.slave.port = b.port + 5
        return self

    def broker(self, name: str) -> Broker:
        for b in self.brokers:
            if b.name == name:
                return b
        raise KeyError(name)

    def node_names(self) -> list[str]:
        names = ["namesrv"]
        for b in self.brokers:
            names.append(b.name)
            if b.slave is not None:
                names.append(f"{b.name}-s")
        if self.proxy.enabled:
            names.append("proxy")
        return names


# ---------------------------------------------------------------- checks


class WitnessCheck(Strict):
    """Round trip through RocketMQ's own tools: benchmark Producer sends, mqadmin reads back."""
    messages: Annotated[StrictInt, Field(ge=1, le=100_000)] = 200
    message_size: Annotated[StrictInt, Field(ge=1, le=4 * 1024 * 1024)] = 128
    threads: Annotated[StrictInt, Field(ge=1, le=64)] = 2
    topic: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,127}$")] = "RMQCHAOS_WITNESS"
    timeout: Duration = 120.0


class Checks(Strict):
    witness: WitnessCheck | None = None


# ---------------------------------------------------------------- load and consumers

TopicName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,120}$")]
GroupName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,120}$")]
RetryOn = Annotated[str, Field(pattern=r"^(timeout|transport|busy|weak|code:\d{1,5})$")]


class Policy(Strict):
    """What the application does after an attempt (loadgen/policies.py has the exact rules)."""
    kind: Literal["no_retry", "retry", "java_default", "resend_to_backup_topic", "ignore_send_status"] = "no_retry"
    attempts: Annotated[StrictInt, Field(ge=1, le=16)] = 3  # retry: attempts in all
    another_broker: StrictBool = True  # retry: next attempt avoids the broker of the last one
    # retry: which results are retried. timeout | transport (no answer: connection refused/closed) |
    # busy (code 2) | weak (stored with a status other than SEND_OK) | code:<n>
    retry_on: list[RetryOn] = ["timeout", "transport", "busy"]
    resend_on: list[RetryOn] = ["busy", "timeout"]  # resend_to_backup_topic: what triggers the resend
    backup_topic: TopicName | None = None  # resend_to_backup_topic: default <topic>_bak
    send_msg_timeout: Duration = 3.0  # java_default: budget for all attempts (sendMsgTimeout)


class Load(Strict):
    """Locust load: `users` producers at `rate` messages/s in total, for `duration` or `messages`."""
    topic: TopicName = "RMQCHAOS_LOAD"
    queues: Annotated[StrictInt, Field(ge=1, le=64)] = 4  # per broker, for the topics the load creates
    users: Annotated[StrictInt, Field(ge=1, le=2000)] = 8
    spawn_rate: Annotated[float, Field(gt=0, le=10000)] = 100.0
    rate: Annotated[float, Field(gt=0, le=200_000)] = 200.0  # messages/s, all users together
    duration: Annotated[float, BeforeValidator(_duration), Field(gt=0, le=6 * 3600)] = 30.0
    messages: Annotated[StrictInt, Field(ge=1, le=100_000_000)] | None = None  # stop after this many
    message_size: Annotated[StrictInt, Field(ge=1, le=4 * 1024 * 1024)] = 1024
    tags: str | None = None
    key_prefix: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{0,40}$")] = ""
    timeout: Duration = 3.0  # per attempt
    policy: Policy = Policy()
    workers: Annotated[StrictInt, Field(ge=0, le=16)] = 0  # 0: one process; N: Locust master + N workers
    ledger: StrictBool = True  # off only to measure the ledger's cost

    def backup_topic(self) -> str | None:
        if self.policy.kind != "resend_to_backup_topic":
            return None
        return self.policy.backup_topic or f"{self.topic}_bak"

    def topics(self) -> list[str]:
        return [self.topic] + ([b] if (b := self.backup_topic()) else [])


class ConsumerInstance(Strict):
    id: NodeName = "c0"
    group: GroupName = "rmqchaos_consumer"
    topics: list[TopicName] | None = None  # default: every topic of the load (incl. the backup topic)
    mode: Literal["all", "ack_first_of_batch"] = "all"
    batch_size: Annotated[StrictInt, Field(ge=1, le=1024)] = 1
    delay_ms: Annotated[StrictInt, Field(ge=0, le=60_000)] = 0
    threads: Annotated[StrictInt, Field(ge=1, le=256)] = 8
    heap_mb: Annotated[StrictInt, Field(ge=64, le=4096)] = 256
    # redeliveries through %RETRY% before a message goes to %DLQ%<group>; -1: the client's default (16)
    max_reconsume_times: Annotated[StrictInt, Field(ge=-1, le=16)] = -1


class Consumers(Strict):
    """Real Java consumers, started before the load and stopped after the drain: once the load has
    stopped, they run until no new delivery arrived for `settle` and every group's lag is 0 (at most
    `drain_timeout`). Lag 0 is the proof: a consumer commits its offsets only after it has recorded
    the deliveries (every 5 s), and a broker that left the route or came back keeps the lag unknown or
    above 0 until its queues are consumed again (re-pulls included). `settle` covers only what lag
    cannot see: redeliveries that wait in the broker's delay levels (retry-pileup sets 35 s); what
    waits in %RETRY%<group> counts in the lag.

    `route_refresh`: how often each consumer asks namesrv for its topics' routes (the Java client's
    pollNameServerInterval, 30 s by default). A consumer learns a new broker of a topic, a broker back
    in the route, or a %RETRY% queue its first route did not list, only at its next refresh."""
    instances: list[ConsumerInstance] = Field(default_factory=lambda: [ConsumerInstance()])
    settle: Duration = 3.0
    drain_timeout: Duration = 300.0
    route_refresh: Annotated[float, BeforeValidator(_duration), Field(ge=1, le=600)] = 30.0


# ---------------------------------------------------------------- faults

NonNegDuration = Annotated[float, BeforeValidator(_duration), Field(ge=0)]


class Repeat(Strict):
    every: Duration
    times: Annotated[StrictInt, Field(ge=2, le=100)]


class Fault(BaseModel):
    """One fault on the load's clock (`at` from the load's start). The keys here are common to every
    kind; any other key is a parameter of the kind (chaos/kinds/), validated against the kind's own
    model when the scenario is loaded through the pipeline (which knows the registry)."""
    model_config = ConfigDict(extra="allow", validate_default=True)
    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,40}$")] | None = None  # default <kind>-<target>-<n>
    kind: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,40}$")]
    target: NodeName | None = None  # a node; none for admin-level kinds
    at: NonNegDuration
    restart_after: Duration | None = None  # kinds that end a node: restart it this long after
    repeat: Repeat | None = None
    timeout: Duration = 60.0  # how long the fault may take to act (an OOM kill: 0.1 s to tens of s)

    @property
    def params(self) -> dict[str, Any]:
        """The kind's own parameters (every key not common to all kinds)."""
        return dict(self.model_extra or {})


class FaultKindSpec(Protocol):
    """What the spec needs to know of a fault kind (chaos.protocol.FaultKind satisfies it)."""
    Params: type[BaseModel]
    target: str  # node | broker | none
    ends_node: bool

    def span(self, params: Any) -> float: ...

    def check(self, params: Any, fault: "Fault", scenario: "Scenario") -> list[tuple[tuple[Any, ...], str]]: ...


class Scenario(Strict):
    name: NodeName  # default: the file's name without .yaml (never inherited through `extends`)
    description: str = ""
    cluster: Cluster = Field(default_factory=Cluster)
    checks: Checks = Checks()
    load: Load | None = None
    consumers: Consumers | None = None  # default with a load: one consumer `c0` acking everything
    faults: list[Fault] = []

    @model_validator(mode="after")
    def _default_consumers(self) -> "Scenario":
        if self.load is not None and self.consumers is None:
            self.consumers = Consumers()
        return self

    def resolved(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


# ---------------------------------------------------------------- RocketMQ config keys

# Keys the platform sets itself (addresses, identity, store location); overriding them would
# break readiness, loopback-only listening or per-node isolation.
PLATFORM_BROKER_KEYS = {
    "brokerClusterName": "cluster.name", "brokerName": "brokers[].name", "brokerId": "brokers[].slave",
    "listenPort": "brokers[].port", "haListenPort": "brokers[].port", "namesrvAddr": "cluster.namesrv.port",
    "brokerIP1": "(always 127.0.0.1)", "brokerIP2": "(always 127.0.0.1)", "bindAddress": "(always 127.0.0.1)",
    "storePathRootDir": "(the run directory)", "storePathCommitLog": "(the run directory)",
    "rocketmqHome": "(the run directory)",
}
PLATFORM_NAMESRV_KEYS = {"listenPort": "cluster.namesrv.port", "bindAddress": "(always 127.0.0.1)",
                         "rocketmqHome": "(the run directory)"}


@lru_cache(maxsize=4)
def config_keys(version: str) -> dict[str, dict[str, str]]:
    """{'broker': {key: type}, 'namesrv': {...}} read by reflection from the jars at setup time."""
    f = paths.rocketmq_home(version) / "config-keys.json"
    if not f.is_file():
        raise UserError(f"{f} is missing", f"run `make setup ROCKETMQ_VERSION={version}`")
    return json.loads(f.read_text())


_RANGE = {"int": (-2**31, 2**31 - 1), "long": (-2**63, 2**63 - 1)}


def _conf_value_error(key: str, value: Any, t: str) -> str | None:
    """Why `value` is not one the broker accepts for a key of type `t` (config-keys.json), or None.
    The broker parses each value with its setter's type and swallows a failure, keeping the default:
    a value it cannot take must be an error here, never a silent substitution."""
    if t.startswith("enum:"):
        allowed = t[5:].split(",")
        if value not in allowed:
            close = difflib.get_close_matches(str(value), allowed, n=1)
            return (f"{key} must be one of {', '.join(allowed)} (got {value!r})"
                    + (f"; did you mean {close[0]}?" if close else ""))
        return None
    if t in _RANGE:
        if not isinstance(value, int) or isinstance(value, bool):
            return f"{key} must be an int (got {value!r})"
        lo, hi = _RANGE[t]
        if not lo <= value <= hi:
            return f"{key} must be within {lo}..{hi} (a Java {t}) (got {value!r})"
        return None
    ok = {"bool": isinstance(value, bool),
          "float": isinstance(value, (int, float)) and not isinstance(value, bool),
          "str": isinstance(value, str)}.get(t, True)
    return None if ok else f"{key} must be {'a ' + t} (got {value!r})"


def _check_conf(conf: dict[str, Any], known: dict[str, str], platform: dict[str, str],
                where: tuple[Any, ...], what: str) -> list[tuple[tuple[Any, ...], str]]:
    errs: list[tuple[tuple[Any, ...], str]] = []
    for key, value in conf.items():
        loc = where + (key,)
        if key in platform:
            errs.append((loc, f"{key} is set by the platform; use {platform[key]}"))
        elif key not in known:
            close = difflib.get_close_matches(key, list(known), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            errs.append((loc, f"unknown {what} key {key!r}{hint}"))
        else:
            msg = _conf_value_error(key, value, known[key])
            if msg:
                errs.append((loc, msg))
    return errs


def fault_errors(s: Scenario, fault_kinds: Mapping[str, FaultKindSpec]) -> list[tuple[tuple[Any, ...], str]]:
    """Each fault against its kind: a known kind, its own parameters (defaults filled in, in place),
    its target, and whether it ends within the load."""
    errs: list[tuple[tuple[Any, ...], str]] = []
    nodes = s.cluster.node_names()
    brokers = [n for n in nodes if n not in ("namesrv", "proxy")]
    for i, f in enumerate(s.faults):
        kind = fault_kinds.get(f.kind)
        if kind is None:
            errs.append((("faults", i, "kind"), f"unknown fault kind {f.kind!r}; known: {', '.join(sorted(fault_kinds))}"))
            continue
        try:
            params = kind.Params.model_validate(f.params)
        except ValidationError as ve:
            for e in ve.errors():
                loc = ("faults", i, *e["loc"])
                if e["type"] == "extra_forbidden":
                    allowed = ", ".join([*Fault.model_fields,
                                         *(f.alias or n for n, f in kind.Params.model_fields.items())])
                    errs.append((loc, f"unknown key for a {f.kind} fault; allowed: {allowed}"))
                else:
                    errs.append((loc, _pydantic_message(e)))
            continue
        f.__pydantic_extra__ = params.model_dump(mode="json")  # the resolved scenario shows every default
        if kind.target == "none":
            if f.target is not None:
                errs.append((("faults", i, "target"), f"a {f.kind} fault acts on the cluster, not on a node: drop target"))
        elif f.target is None:
            errs.append((("faults", i), f"a {f.kind} fault needs `target:` (one of {', '.join(nodes)})"))
        elif f.target not in (brokers if kind.target == "broker" else nodes):
            allowed = brokers if kind.target == "broker" else nodes
            errs.append((("faults", i, "target"), f"no {'broker' if kind.target == 'broker' else 'node'} "
                                                  f"{f.target!r} in this cluster; {kind.target}s: {', '.join(allowed)}"))
        if f.restart_after is not None and not kind.ends_node:
            ending = ", ".join(sorted(k for k, v in fault_kinds.items() if v.ends_node))
            errs.append((("faults", i, "restart_after"), f"restart_after applies to {ending}"))
        span = (f.repeat.every * (f.repeat.times - 1) if f.repeat else 0.0) + kind.span(params) + (f.restart_after or 0.0)
        if s.load is None:
            errs.append((("faults", i), "faults run on the load's clock: add a `load:` section"))
        elif math.isinf(span):  # lasts until the load ends: must start before it does
            if f.at >= s.load.duration:
                errs.append((("faults", i, "at"), f"the fault starts at {f.at:g}s, after the load's duration "
                                                  f"{s.load.duration:g}s"))
        elif f.at + span > s.load.duration:
            errs.append((("faults", i, "at"), f"the fault (at {f.at:g}s, lasting {span:g}s) ends after the "
                                              f"load's duration {s.load.duration:g}s"))
        errs += [(("faults", i, *loc), msg) for loc, msg in kind.check(params, f, s)]
    return errs


def semantic_errors(s: Scenario, fault_kinds: Mapping[str, FaultKindSpec] | None = None
                    ) -> list[tuple[tuple[Any, ...], str]]:
    """Checks that need more than field types: RocketMQ config keys, port collisions, and (given
    the registry of fault kinds) every fault against its kind."""
    keys = config_keys(s.cluster.rocketmq_version)
    errs = _check_conf(s.cluster.namesrv.config, keys["namesrv"], PLATFORM_NAMESRV_KEYS,
                       ("cluster", "namesrv", "config"), "namesrv")
    errs += _check_conf(s.cluster.broker_defaults.config, keys["broker"], PLATFORM_BROKER_KEYS,
                        ("cluster", "broker_defaults", "config"), "broker.conf")
    used: dict[int, tuple[Any, ...]] = {s.cluster.namesrv.port: ("cluster", "namesrv", "port")}
    names: set[str] = set()
    for i, b in enumerate(s.cluster.brokers):
        if b.name in names:
            errs.append((("cluster", "brokers", i, "name"), f"broker name {b.name!r} is used twice"))
        names.add(b.name)
        errs += _check_conf(b.config, keys["broker"], PLATFORM_BROKER_KEYS, ("cluster", "brokers", i, "config"),
                            "broker.conf")
        nodes = [(b.port, ("cluster", "brokers", i, "port"))]
        if b.slave is not None:
            nodes.append((b.slave.port, ("cluster", "brokers", i, "slave", "port")))
        for port, loc in nodes:
            assert port is not None
            if port > 65535:  # a slave's default: its master's port + 5
                errs.append((loc, f"the slave's default port {port} (its master's + 5) is beyond 65535: "
                                  "set slave.port or a lower master port"))
            elif port + 1 > 65535:
                errs.append((loc, f"port {port} also needs port+1 ({port + 1}, HA), beyond 65535: use a port "
                                  "of at most 65534"))
            for p in (port - 2, port, port + 1):  # fast remoting server, main, HA
                if p in used:
                    errs.append((loc, f"port {p} (from port {port}, which also uses port-2 and port+1) collides "
                                      f"with {_dotted(used[p])}"))
                used[p] = loc
    if s.consumers is not None:
        ids: set[str] = set()
        for i, c in enumerate(s.consumers.instances):
            if c.id in ids:
                errs.append((("consumers", "instances", i, "id"), f"consumer id {c.id!r} is used twice"))
            ids.add(c.id)
        if s.load is None and s.consumers.instances and any(c.topics is None for c in s.consumers.instances):
            errs.append((("consumers",), "consumers without `topics` need a `load` section to take them from"))
    if fault_kinds is not None:
        errs += fault_errors(s, fault_kinds)
    ids = [f.id for f in s.faults if f.id]
    for i, f in enumerate(s.faults):
        if f.id and ids.count(f.id) > 1:
            errs.append((("faults", i, "id"), f"fault id {f.id!r} is used twice"))
    if s.load is not None and s.load.backup_topic() == s.load.topic:
        errs.append((("load", "policy", "backup_topic"), "the backup topic must differ from load.topic"))
    if s.cluster.proxy.enabled:
        for field in ("grpc_port", "remoting_port"):
            p = getattr(s.cluster.proxy, field)
            if p in used:
                errs.append((("cluster", "proxy", field), f"port {p} collides with {_dotted(used[p])}"))
            used[p] = ("cluster", "proxy", field)
    return errs


# ---------------------------------------------------------------- loading with line numbers


class SpecError(UserError):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(lines[0])
        self.lines = lines
        self.detail = "\n".join(lines[1:])


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def _node_at(root: yaml.Node | None, loc: tuple[Any, ...]) -> yaml.Node | None:
    """The deepest YAML node along `loc` (keys for mappings, indexes for sequences)."""
    node = root
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.value == str(part):
                    node = v
                    break
            else:
                return node
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            return node
    return node


def _key_node(root: yaml.Node | None, loc: tuple[Any, ...]) -> yaml.Node | None:
    parent = _node_at(root, loc[:-1])
    if isinstance(parent, yaml.MappingNode):
        for k, _ in parent.value:
            if isinstance(k, yaml.ScalarNode) and k.value == str(loc[-1]):
                return k
    return parent


def _duplicate_keys(node: yaml.Node | None, loc: tuple[Any, ...] = ()) -> list[tuple[yaml.Node, str]]:
    out: list[tuple[yaml.Node, str]] = []
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode):
                if k.value in seen:
                    out.append((k, f"{_dotted(loc + (k.value,))}: key given twice"))
                seen.add(k.value)
                out += _duplicate_keys(v, loc + (k.value,))
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            out += _duplicate_keys(v, loc + (i,))
    return out


def _pydantic_message(e: dict[str, Any]) -> str:
    t = e["type"]
    if t == "extra_forbidden":
        return "unknown key (allowed here: see docs/spec.md)"
    msg = e["msg"]
    if t.startswith("value_error"):
        msg = msg.removeprefix("Value error, ")
    inp = e.get("input")
    if t not in ("missing",) and not isinstance(inp, (dict, list)) and "(got " not in msg:
        msg += f" (got {inp!r})"
    return msg


def _allowed_keys(model: type[BaseModel] | None) -> str:
    return ", ".join(model.model_fields) if model else ""


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The spec model whose mapping contains the last key of `loc` (for 'allowed keys' hints)."""
    model: Any = Scenario
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return None
        ann = field.annotation
        model = _inner_model(ann)
        if model is None:
            return None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _inner_model(ann: Any) -> type[BaseModel] | None:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for a in getattr(ann, "__args__", ()) or ():
        m = _inner_model(a)
        if m is not None:
            return m
    meta = getattr(ann, "__origin__", None)
    if meta is not None and isinstance(meta, type) and issubclass(meta, BaseModel):
        return meta
    return None


MAX_EXTENDS = 8  # overlay depth
MAX_NODES = 100_000  # YAML nodes after alias expansion (an alias bomb stops here, at once)
MAX_DEPTH = 64


def _compose(text: str, filename: str) -> yaml.Node | None:
    """The YAML node tree of one document; every node's mark carries `filename`, so errors name the
    file a value came from even after overlays are merged."""
    import io
    stream = io.StringIO(text)
    stream.name = filename  # type: ignore[attr-defined]  (yaml's Reader takes the mark's name from it)
    try:
        root = yaml.compose(stream, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{filename}:{mark.line + 1}" if mark else filename
        raise SpecError([f"{where}: not valid YAML: {getattr(e, 'problem', None) or e}"]) from None
    _check_size(root, filename)
    dups = _duplicate_keys(root)
    if dups:
        raise SpecError([f"{_where(n)}: {m}" for n, m in dups])
    return root


def _check_size(root: yaml.Node | None, filename: str) -> None:
    """Refuse recursive aliases, alias bombs and absurd nesting before anything expands them."""
    count = 0
    stack: list[tuple[yaml.Node, int, frozenset[int]]] = [(root, 0, frozenset())] if root is not None else []
    while stack:
        node, depth, path = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise SpecError([f"{filename}: the scenario expands to more than {MAX_NODES} YAML values "
                             "(an alias bomb?): write it out without nested aliases"])
        if depth > MAX_DEPTH:
            raise SpecError([f"{_where(node)}: nested more than {MAX_DEPTH} levels deep"])
        if id(node) in path:
            raise SpecError([f"{_where(node)}: a YAML alias refers to itself (recursive alias)"])
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            inner = path | {id(node)}
            children = [x for kv in node.value for x in kv] if isinstance(node, yaml.MappingNode) else node.value
            stack.extend((c, depth + 1, inner) for c in children)


def _where(node: yaml.Node | None, default: str = "<scenario>") -> str:
    if node is None:
        return f"{default}:1"
    return f"{node.start_mark.name}:{node.start_mark.line + 1}"


def _mapping_get(node: yaml.MappingNode, key: str) -> yaml.Node | None:
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key:
            return v
    return None


def _without(node: yaml.MappingNode, *keys: str) -> yaml.MappingNode:
    return yaml.MappingNode(node.tag, [(k, v) for k, v in node.value
                                       if not (isinstance(k, yaml.ScalarNode) and k.value in keys)],
                            node.start_mark, node.end_mark, node.flow_style)


def _merge(base: yaml.Node, over: yaml.Node) -> yaml.Node:
    """An overlay over its base: mappings merge key by key (recursively), anything else is replaced."""
    if not (isinstance(base, yaml.MappingNode) and isinstance(over, yaml.MappingNode)):
        return over
    out: list[tuple[yaml.Node, yaml.Node]] = []
    over_keys = {k.value: (k, v) for k, v in over.value if isinstance(k, yaml.ScalarNode)}
    for k, v in base.value:
        if isinstance(k, yaml.ScalarNode) and k.value in over_keys:
            ok, ov = over_keys.pop(k.value)
            out.append((ok, _merge(v, ov)))
        else:
            out.append((k, v))
    out += [(k, v) for k, v in over.value if isinstance(k, yaml.ScalarNode) and k.value in over_keys]
    return yaml.MappingNode(over.tag, out, over.start_mark, over.end_mark, over.flow_style)


def read_text(path: Path, what: str) -> str:
    """A UTF-8 text file, or one UserError line naming it (unreadable, binary, or another encoding)."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise UserError(f"{path}: cannot read {what}: {e.strerror}", "check the path") from None
    if b"\0" in raw:
        raise UserError(f"{path}: not a {what} file (binary: it holds NUL bytes)", f"pass a YAML {what} file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise UserError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})",
                        f"save the {what} file as UTF-8") from None


def _resolve(path: Path, chain: tuple[Path, ...] = ()) -> yaml.Node | None:
    """The node tree of `path` with its `extends:` chain merged under it. `name` is never inherited:
    a file without one is named after itself."""
    root = _compose(read_text(path, "scenario"), str(path))
    if not isinstance(root, yaml.MappingNode):
        return root
    ext = _mapping_get(root, "extends")
    if ext is not None:
        if not isinstance(ext, yaml.ScalarNode) or not ext.value:
            raise SpecError([f"{_where(ext)}: extends: expected the path of a base scenario file"])
        base_path = (path.parent / ext.value).resolve()
        if base_path in chain or base_path == path.resolve():
            raise SpecError([f"{_where(ext)}: extends: {ext.value} extends this file again (a cycle)"])
        if len(chain) >= MAX_EXTENDS:
            raise SpecError([f"{_where(ext)}: extends: more than {MAX_EXTENDS} levels of base files"])
        if not base_path.is_file():
            raise SpecError([f"{_where(ext)}: extends: no such file {base_path}"])
        base = _resolve(base_path, chain + (path.resolve(),))
        if not isinstance(base, yaml.MappingNode):
            raise SpecError([f"{_where(ext)}: extends: {ext.value} is not a scenario mapping"])
        root = _merge(_without(base, "name"), _without(root, "extends"))  # type: ignore[assignment]
    assert isinstance(root, yaml.MappingNode)
    if _mapping_get(root, "name") is None:
        key = yaml.ScalarNode("tag:yaml.org,2002:str", "name", root.start_mark, root.start_mark)
        val = yaml.ScalarNode("tag:yaml.org,2002:str", path.stem, root.start_mark, root.start_mark)
        root = yaml.MappingNode(root.tag, [(key, val), *root.value], root.start_mark, root.end_mark, root.flow_style)
    return root


def load_scenario(path: str | Path, fault_kinds: Mapping[str, FaultKindSpec] | None = None) -> Scenario:
    """A scenario file, its `extends:` bases merged under it, validated. With `fault_kinds` (the
    pipeline passes chaos's registry) every fault is checked against its kind too."""
    p = Path(path)
    return _validate(_resolve(p), str(p), fault_kinds)


def parse_scenario(text: str, filename: str = "<scenario>",
                   fault_kinds: Mapping[str, FaultKindSpec] | None = None) -> Scenario:
    """One scenario document (no `extends:`: that needs a file to resolve from)."""
    root = _compose(text, filename)
    if isinstance(root, yaml.MappingNode) and _mapping_get(root, "extends") is not None:
        raise SpecError([f"{_where(_mapping_get(root, 'extends'))}: extends: only a scenario file can extend another"])
    return _validate(root, filename, fault_kinds)


def _validate(root: yaml.Node | None, filename: str, fault_kinds: Mapping[str, FaultKindSpec] | None) -> Scenario:
    if not isinstance(root, yaml.MappingNode):
        raise SpecError([f"{_where(root, filename)}: a scenario is a mapping with at least `name:`"])
    data = yaml.SafeLoader("").construct_document(root)

    def where(node: yaml.Node | None) -> str:
        return _where(node, filename)

    try:
        s = Scenario.model_validate(data)
    except ValidationError as ve:
        lines = []
        for e in ve.errors():
            loc = tuple(e["loc"])
            if e["type"] == "extra_forbidden":
                allowed = _allowed_keys(_model_at(loc))
                lines.append(f"{where(_key_node(root, loc))}: {_dotted(loc)}: unknown key"
                             + (f"; allowed: {allowed}" if allowed else ""))
            else:
                lines.append(f"{where(_node_at(root, loc))}: {_dotted(loc)}: {_pydantic_message(e)}")
        raise SpecError(lines) from None
    errs = semantic_errors(s, fault_kinds)
    if errs:
        raise SpecError([f"{where(_key_node(root, loc))}: {_dotted(loc)}: {msg}" for loc, msg in errs])
    return s


def dump_scenario(s: Scenario) -> str:
    return yaml.safe_dump(s.resolved(), sort_keys=False)
