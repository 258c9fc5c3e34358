"""The gRPC path (issue 52): what the spec refuses in one line each (fast), and a real gRPC producer
and SimpleConsumer through a real proxy: nothing lost, nothing duplicated, every ack answered ok."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import run_here, write_scenario

CLUSTER = {"subnet": "127.0.52.0/24", "namesrv": {"port": 25276}, "ready_timeout": "90s", "stop_timeout": "10s",
           "broker_defaults": {"jvm": {"heap_mb": 384, "max_direct_memory_mb": 256},
                               "config": {"brokerRole": "ASYNC_MASTER", "flushDiskType": "ASYNC_FLUSH"}},
           "brokers": [{"name": "broker-a", "port": 25211}, {"name": "broker-b", "port": 25221}],
           "proxy": {"enabled": True, "grpc_port": 25281, "remoting_port": 25280}}


@pytest.mark.fast
@pytest.mark.parametrize("proxy, load, consumers, line", [
    (False, {"client": "grpc"}, [{"id": "c0"}],
     "t.yaml:4: load.client: a gRPC load: it goes through the proxy, and this cluster has none: set "
     "cluster.proxy.enabled: true"),
    (False, {}, [{"id": "c0", "grpc": {}}], "consumers.instances[0].grpc: consumer c0 through gRPC: it goes through the "
                                             "proxy, and this cluster has none"),
    (True, {}, [{"id": "c0", "grpc": {"invisible": "5s"}}],
     "consumers.instances[0].grpc.invisible: 5 s is under the proxy's least invisible time for a receive (10 s, "
     "minInvisibleTimeMillsForRecv), which refuses every such receive: use at least 10s"),
    (True, {}, [{"id": "c0", "grpc": {"long_polling": "2s"}}],
     "consumers.instances[0].grpc.long_polling: 2 s is outside the proxy's long polling bounds (5-20 s"),
    (True, {}, [{"id": "c0", "grpc": {"invisible": "15s", "last_ack_delay": "15s"}}],
     "consumers.instances[0].grpc.last_ack_delay: 15 s is not within the invisible time (15 s)"),
    (True, {"client": "grpc", "order": {}}, [{"id": "c0", "listener": "orderly"}],
     "load.order: the gRPC load sends normal messages only"),
    (True, {"client": "grpc", "policy": {"kind": "java_default"}}, [{"id": "c0"}],
     "load.policy.kind: the gRPC load takes policy no_retry or retry (attempts), not java_default"),
    (True, {}, [{"id": "c0", "grpc": {"kind": "push", "change_invisible": "20s"}}],
     "consumer c0: a PushConsumer acks by itself; change_invisible, last_ack_delay and mode ack_first_of_batch need "
     "kind: simple"),
])
def test_bad_grpc_settings_are_one_line_at_load(tmp_path: Path, proxy: bool, load: dict, consumers: list,
                                                line: str) -> None:
    import yaml
    from pipeline.runs import load_scenario
    from rmqchaos.spec import SpecError
    f = tmp_path / "t.yaml"
    f.write_text("name: t\ncluster: {brokers: [{name: broker-a, port: 10911}]"
                 + (", proxy: {enabled: true}" if proxy else "") + "}\n"
                 + "# the load\n" + f"load: {yaml.safe_dump(load, default_flow_style=True)}"
                 + f"consumers: {{instances: {yaml.safe_dump(consumers, default_flow_style=True).strip()}}}\n")
    with pytest.raises(SpecError) as e:
        load_scenario(f)
    assert line in e.value.line(), e.value.line()


@pytest.mark.fast
def test_a_pop_consumer_stretches_the_drains_settle_over_its_invisible_time() -> None:
    from loadgen.drain import settle_of
    from rmqchaos.spec import Scenario
    s = Scenario.model_validate({"name": "t", "cluster": {"proxy": {"enabled": True}}, "load": {},
                                 "consumers": {"settle": "3s", "instances": [
                                     {"id": "c0"}, {"id": "c1", "grpc": {"invisible": "20s", "change_invisible": "30s"}}]}})
    assert settle_of(s) == 20 + 30 + 60  # the default revive_wait
    s.consumers.revive_wait = 5  # type: ignore[union-attr]
    assert settle_of(s) == 20 + 30 + 5
    s.consumers.instances.pop()  # type: ignore[union-attr]
    assert settle_of(s) == 3


def test_a_grpc_producer_and_a_simple_consumer_through_a_proxy_lose_and_duplicate_nothing(
        tmp_path: Path, kept_spark: Any) -> None:
    f = write_scenario(tmp_path / "t.yaml", {
        "name": "grpc-plain", "cluster": CLUSTER,
        "load": {"client": "grpc", "topic": "T_GRPC", "users": 4, "rate": 100, "duration": "12s"},
        # a SimpleConsumer and a PushConsumer in one group: POP shares the messages between them; every
        # delivery is acked, so the drain waits its invisible time plus 5 s, not plus the default 60 s
        "consumers": {"settle": "2s", "drain_timeout": "60s", "revive_wait": "5s",
                      "instances": [{"id": "c0", "group": "g_grpc", "batch_size": 16, "threads": 2,
                                     "grpc": {"invisible": "10s", "long_polling": "5s"}},
                                    {"id": "c1", "group": "g_grpc", "threads": 2, "grpc": {"kind": "push"}}]}})
    run, s = run_here(f, tmp_path / "run")
    c = s["counts"]
    # a busy refusal (code 2: the broker stored nothing) is a slow host's, not the path's: a fresh clone's
    # run had one [TIMEOUT_CLEAN_QUEUE] while its sends ran 6.6 s behind; every other key arrives once
    busy = int((s["errors"].get("by_code") or {}).get("2", 0))
    assert c["keys"] == 1200 and c["failed"] == busy <= 12 and c["ok"] == 1200 - busy, (c, s["errors"])
    assert (c["lost"], c["duplicated"], c["indeterminate"], c["unexpected"], c["corrupted_deliveries"]) == (0, 0, 0, 0, 0)
    # the ledgers: one schema for both paths; every delivery through the proxy carries its receipt handle;
    # the SimpleConsumer's acks were answered ok, the PushConsumer's client acked by itself (none recorded)
    from rmqchaos.ledger.schema import RECEIVE_KEYS
    simple, push = ([json.loads(x) for x in (run / "ledgers" / f"receive-{i}.jsonl").read_text().splitlines()]
                    for i in ("c0", "c1"))
    assert len(simple) + len(push) == c["ok"] and simple and push, (len(simple), len(push))
    assert {tuple(r) for r in simple + push} == {RECEIVE_KEYS}
    assert all(r["receipt_handle"] and r["delivery_attempt"] == 1 and r["ack"] == "ok" for r in simple)
    assert all(r["receipt_handle"] and r["delivery_attempt"] == 1 and r["ack"] is None for r in push)
    p = s["pop"]  # POP's classes judge the SimpleConsumer's deliveries only
    assert p is not None and p["deliveries"] == len(simple) == p["acks_ok"] and p["acks_refused"] == 0, p
    assert set(p["classes"].values()) == {0}, p
    recv = simple + push
    sends = [json.loads(x) for x in (run / "ledgers" / "send-grpc0.jsonl").read_text().splitlines()]
    assert {r["rec"] for r in sends} == {"intent", "outcome"} and len(sends) == 2400
    assert {r["msg_id"] for r in sends if r["rec"] == "outcome" and r["outcome"] == "ok"} == {r["msg_id"] for r in recv}


@pytest.mark.fast
def test_the_grpc_benchmark_without_a_proxy_address_is_one_line() -> None:
    from conftest import cli
    r = cli("bench", "producer", "--mode", "grpc", "--namesrv", "127.0.0.1:9876", timeout=60)
    assert r.returncode != 0 and r.stdout == "", (r.returncode, r.stdout)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--mode grpc sends through the proxy, and --namesrv does not say where it is" in lines[0], \
        r.stderr


def test_the_proxy_killed_mid_load_forces_redeliveries_the_analysis_puts_on_the_crash(
        tmp_path: Path, kept_spark: Any) -> None:
    """The proxy killed -9 while deliveries are being acked through it, started again: the acks it took
    down with it come back as redeliveries after their invisible time, counted under the kill; nothing
    acknowledged is lost."""
    f = write_scenario(tmp_path / "t.yaml", {
        "name": "grpc-proxy-kill-short", "cluster": {**CLUSTER, "subnet": "127.0.53.0/24", "namesrv": {"port": 25376},
                                                     "brokers": [{"name": "broker-a", "port": 25311},
                                                                 {"name": "broker-b", "port": 25321}],
                                                     "proxy": {"enabled": True, "grpc_port": 25391,
                                                               "remoting_port": 25390}},
        "load": {"client": "grpc", "topic": "T_GRPC_KILL", "users": 16, "rate": 150, "duration": "20s",
                 "policy": {"kind": "retry", "attempts": 3}},
        # 40 ms per message: the consumer is always acking something when the proxy dies
        "consumers": {"settle": "2s", "drain_timeout": "90s",
                      "instances": [{"id": "c0", "group": "g_simple", "batch_size": 16, "threads": 4, "delay_ms": 40,
                                     "grpc": {"invisible": "10s", "long_polling": "5s"}}]},
        "faults": [{"id": "kill-proxy", "kind": "kill", "target": "proxy", "at": "8s", "restart_after": "5s"}]})
    run, s = run_here(f, tmp_path / "run")
    c, p = s["counts"], s["pop"]
    assert c["lost"] == 0 and c["unexpected"] == 0, c
    assert p is not None and p["acks_refused"] > 0, p
    forced = p["by_fault"]["kill-proxy"]
    assert forced > 0 and forced == p["classes"]["redelivered_after_invisible"], p
    assert p["causes"]["redelivered_after_invisible"]["ack_refused"] == forced, p
    assert p["classes"]["redelivered_after_ack"] == 0 and p["classes"]["consumed_but_lost"] == 0, p
    # every redelivery is one whose ack the crash took (a resend of a send in flight at the kill may add a
    # producer_resend duplicate beside them)
    assert s["duplicates_by_cause"]["consumer_retry"] == forced, (s["duplicates_by_cause"], p)
    events = [json.loads(x) for x in (run / "timeline.jsonl").read_text().splitlines()]
    assert [e["params"]["fault_id"] for e in events if e["kind"] == "fault" and e["target"] == "proxy"] == [
        "kill-proxy", "kill-proxy-restart"]
    # the serving gate held the kill until both broker groups behind the proxy had answered a receive of
    # the POP group (the long twin below: a SimpleConsumer and a PushConsumer, each its own group)
    gate = [e for e in events if e["kind"] == "serving_gate"]
    assert [e["outcome"] for e in gate] == ["passed"], gate
    g = gate[0]["params"]
    assert g["pop_groups"] == ["g_simple"] and g["not_gated"] == {} and g["missing"] == [], g
    assert set(g["first_served_s"]["g_simple"]) == {"broker-a", "broker-b"}, g
    kill = next(e for e in events if e["kind"] == "fault" and e["params"]["fault_id"] == "kill-proxy")
    assert kill["start_ms"] >= gate[0]["end_ms"], (kill, gate)


@pytest.mark.fast
def test_the_proxy_in_local_mode_runs_inside_every_broker_and_clients_get_every_brokers_endpoint() -> None:
    """proxy.mode local: no proxy node; each broker node starts as ProxyStartup -pm local with its own
    broker.conf and rmq-proxy.json (the same gRPC port on every broker's own address), listens on the
    proxy's ports too (so the port check and partitions cover them), and the clients get every
    broker's endpoint. The compose file mounts each broker's rmq-proxy.json."""
    from cluster.plan.compose import render
    from cluster.local.cluster import LocalCluster
    from cluster.plan.nodes import MAIN, main_args, plan, proxy_config
    from rmqchaos.spec import Scenario
    d = {"name": "t", "cluster": {"subnet": "127.0.54.0/24", "proxy": {"enabled": True, "mode": "local", "grpc_port": 25481,
                                                                          "remoting_port": 25480},
                                  "brokers": [{"name": "broker-a", "port": 25411, "slave": {"port": 25415}},
                                              {"name": "broker-b", "port": 25421}]}}
    s = Scenario.model_validate(d)
    assert s.cluster.node_names() == ["namesrv", "broker-a", "broker-a-s", "broker-b"]
    ps = {p.name: p for p in plan(s)}
    assert "proxy" not in ps
    a = ps["broker-a"]
    assert a.ports == [25411, 25409, 25412, 25481, 25480] and a.serves_grpc and not ps["namesrv"].serves_grpc
    main, args, props = main_args(a, "/x/broker.conf", "127.0.54.1:9876", "/x/rmq-proxy.json")
    assert (main, args, props) == (MAIN["proxy"], ["-pm", "local", "-bc", "/x/broker.conf", "-n", "127.0.54.1:9876"],
                                   {"com.rocketmq.proxy.configPath": "/x/rmq-proxy.json"})
    name, text = proxy_config(a) or ("", "")
    assert name == "rmq-proxy.json" and json.loads(text) == {
        "rocketMQClusterName": "DefaultCluster", "namesrvAddr": "127.0.54.1:9876", "grpcServerPort": 25481,
        "remotingListenPort": 25480}
    c = LocalCluster(None, s)  # type: ignore[arg-type]  # the plan's answer only: no run directory needed
    assert c.proxy_grpc_addr() == "127.0.54.11:25481;127.0.54.12:25481;127.0.54.21:25481"
    files = render(s, "t.yaml")
    assert json.loads(files["docker/broker-a-proxy.json"]) == json.loads(text)
    assert "./docker/broker-b-proxy.json:/home/rocketmq/conf/broker-b-proxy.json:ro" in files["docker-compose.yml"]
    # cluster mode, the default: the proxy is a node of its own, the brokers start as brokers
    s2 = Scenario.model_validate({**d, "cluster": {**d["cluster"], "proxy": {"enabled": True}}})
    ps2 = {p.name: p for p in plan(s2)}
    assert ps2["proxy"].serves_grpc and proxy_config(ps2["broker-a"]) is None and ps2["broker-a"].ports == [25411, 25409, 25412]
    assert main_args(ps2["broker-a"], "/x/broker.conf", "ns")[0] == MAIN["broker"]


# long: test_the_proxy_killed_mid_load_... checks the gate on its one SimpleConsumer group in `make test`
@pytest.mark.long
def test_the_serving_gate_waits_for_pop_consumers_through_the_proxy(tmp_path: Path, kept_spark: Any) -> None:
    """A SimpleConsumer and a PushConsumer, each its own POP group: the serving gate holds the fault
    until every broker group behind the proxy answered a receive of each group (with messages it
    popped, or "no new message" to a receive that asked it), and records when, per broker group."""
    f = write_scenario(tmp_path / "t.yaml", {
        "name": "grpc-serving-gate", "cluster": {**CLUSTER, "subnet": "127.0.56.0/24", "namesrv": {"port": 25676},
                                                 "brokers": [{"name": "broker-a", "port": 25611},
                                                             {"name": "broker-b", "port": 25621}],
                                                 "proxy": {"enabled": True, "grpc_port": 25681, "remoting_port": 25680}},
        "load": {"client": "grpc", "topic": "T_GRPC_GATE", "users": 4, "rate": 50, "duration": "8s"},
        "consumers": {"settle": "2s", "drain_timeout": "60s",
                      "instances": [{"id": "c0", "group": "g_simple", "batch_size": 16, "threads": 2,
                                     "grpc": {"invisible": "10s", "long_polling": "5s"}},
                                    {"id": "c1", "group": "g_push", "threads": 2, "grpc": {"kind": "push"}}]},
        "faults": [{"id": "pause-b", "kind": "pause", "target": "broker-b", "at": "1s", "duration": "1s"}]})
    run, s = run_here(f, tmp_path / "run")
    events = [json.loads(x) for x in (run / "timeline.jsonl").read_text().splitlines()]
    gate = [e for e in events if e["kind"] == "serving_gate"]
    assert [e["outcome"] for e in gate] == ["passed"], gate
    p = gate[0]["params"]
    assert p["pop_groups"] == ["g_push", "g_simple"] and p["not_gated"] == {} and p["missing"] == [], p
    firsts = p["first_served_s"]
    assert set(firsts) == {"g_push", "g_simple"} and all(set(m) == {"broker-a", "broker-b"} for m in firsts.values()), p
    # seconds from the consumers' start (all of them started: one served before the last started is below 0)
    assert all(v is not None and v <= 30 for m in firsts.values() for v in m.values()), firsts
    # the fault came after the gate passed (held back past its 1 s when the gate passed later)
    fault = next(e for e in events if e["kind"] == "fault" and e["params"].get("fault_id") == "pause-b")
    assert fault["start_ms"] >= gate[0]["end_ms"], (fault, gate)
    # each POP consumer's status, keyed by broker name: both broker groups served its receives
    for cid in ("c0", "c1"):
        st = json.loads((run / "consumers" / f"serving-{cid}.json").read_text())
        assert st["keyed_by"] == "broker_name" and st["unwatched"] is None, st
        assert {b for b, v in st["brokers"].items() if v["served"] > 0} == {"broker-a", "broker-b"}, st
    sv = s["serving"]
    assert sv["gate"]["pop_groups"] == ["g_push", "g_simple"], sv["gate"]
    assert s["counts"]["lost"] == 0, s["counts"]
