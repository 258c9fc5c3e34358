"""Scenario spec: defaults, and errors that name file, line, key and what is allowed (pure logic)."""
from __future__ import annotations

from pathlib import Path

import pytest

from rmqchaos.errors import UserError
from rmqchaos.spec import SpecError, load_scenario, parse_scenario

pytestmark = pytest.mark.fast


REPO = Path(__file__).resolve().parent.parent


def err(text: str) -> SpecError:
    with pytest.raises(SpecError) as e:
        parse_scenario(text, "t.yaml")
    return e.value


def test_smoke_scenario_is_valid_and_defaults_fill_in() -> None:
    s = load_scenario(REPO / "scenarios" / "smoke.yaml")
    assert [b.name for b in s.cluster.brokers] == ["broker-a", "broker-b"]
    assert s.cluster.rocketmq_version == "5.5.0"
    assert s.checks.witness is not None and s.checks.witness.messages == 1000


def test_minimal_scenario_gets_two_broker_groups_with_distinct_ports() -> None:
    s = parse_scenario("name: x\n")
    assert [(b.name, b.port) for b in s.cluster.brokers] == [("broker-a", 10911), ("broker-b", 10921)]
    assert s.cluster.namesrv.port == 9876
    assert s.cluster.ready_timeout == 120.0


def test_unknown_key_names_file_line_key_and_allowed_keys() -> None:
    e = err("name: x\ncluster:\n  namesrv:\n    port: 9876\n  brokerz: []\n")
    assert e.lines[0].startswith("t.yaml:5: cluster.brokerz: unknown key; allowed: ")
    assert "brokers" in e.lines[0]


def test_wrong_type_names_line_and_value() -> None:
    e = err("name: x\ncluster:\n  namesrv:\n    port: high\n")
    assert e.lines[0].startswith("t.yaml:4: cluster.namesrv.port: ")
    assert "'high'" in e.lines[0]


def test_negative_value_is_rejected_with_its_line() -> None:
    e = err("name: x\ncluster:\n  brokers:\n    - name: broker-a\n      port: -5\n")
    assert e.lines[0].startswith("t.yaml:5: cluster.brokers[0].port: ")
    assert "-5" in e.lines[0]


def test_negative_duration_is_rejected() -> None:
    e = err("name: x\ncluster:\n  ready_timeout: -3s\n")
    assert e.lines[0].startswith("t.yaml:3: cluster.ready_timeout: ")
    assert "negative" in e.lines[0]


def test_duplicate_key_is_an_error() -> None:
    e = err("name: x\nname: y\n")
    assert e.lines[0] == "t.yaml:2: name: key given twice"


def test_unknown_broker_conf_key_suggests_the_right_one() -> None:
    e = err("name: x\ncluster:\n  broker_defaults:\n    config:\n      flushDiskTyp: SYNC_FLUSH\n")
    assert e.lines[0].startswith("t.yaml:5: cluster.broker_defaults.config.flushDiskTyp: unknown broker.conf key")
    assert "did you mean flushDiskType?" in e.lines[0]


def test_every_broker_conf_key_of_the_issue_is_settable() -> None:
    keys = ["transientStorePoolEnable: true", "transientStorePoolSize: 2", "flushDiskType: SYNC_FLUSH",
            "brokerRole: SYNC_MASTER", "waitTimeMillsInSendQueue: 500", "osPageCacheBusyTimeOutMills: 2000",
            "sendMessageThreadPoolNums: 2", "useReentrantLockWhenPutMessage: false",
            "mappedFileSizeCommitLog: 134217728", "commitIntervalCommitLog: 100", "brokerFastFailureEnable: false"]
    s = parse_scenario("name: x\ncluster:\n  brokers:\n    - name: broker-a\n      config:\n"
                       + "".join(f"        {k}\n" for k in keys))
    assert s.cluster.brokers[0].config["transientStorePoolEnable"] is True


def test_broker_conf_value_type_is_checked() -> None:
    e = err("name: x\ncluster:\n  broker_defaults:\n    config:\n      transientStorePoolEnable: yes-please\n")
    assert "t.yaml:5:" in e.lines[0] and "must be a bool" in e.lines[0]


def test_platform_owned_key_is_refused_with_where_to_set_it() -> None:
    e = err("name: x\ncluster:\n  brokers:\n    - name: broker-a\n      config:\n        listenPort: 1\n")
    assert e.lines[0] == "t.yaml:6: cluster.brokers[0].config.listenPort: listenPort is set by the platform; " \
                         "use brokers[].port"


def test_colliding_ports_are_rejected() -> None:
    e = err("name: x\ncluster:\n  brokers:\n    - name: broker-a\n      port: 10911\n"
            "    - name: broker-b\n      port: 10912\n")
    assert e.lines[0].startswith("t.yaml:7: cluster.brokers[1].port: port 10912")
    assert "collides with cluster.brokers[0].port" in e.lines[0]


def test_duplicate_broker_names_are_rejected() -> None:
    e = err("name: x\ncluster:\n  brokers:\n    - name: a\n    - name: a\n")
    assert e.lines[0] == "t.yaml:5: cluster.brokers[1].name: broker name 'a' is used twice"


def test_namesrv_system_properties_and_jvm_options_are_accepted() -> None:
    s = parse_scenario("name: x\ncluster:\n  namesrv:\n    jvm:\n      heap_mb: 256\n      system_properties:\n"
                       "        com.rocketmq.remoting.frameMaxLength: 33554432\n")
    assert s.cluster.namesrv.jvm.system_properties == {"com.rocketmq.remoting.frameMaxLength": 33554432}


def test_not_yaml_and_missing_file_are_one_line_errors(tmp_path: Path) -> None:
    assert err("name: [x\n").lines[0].startswith("t.yaml:")
    with pytest.raises(UserError) as e:
        load_scenario(tmp_path / "nope.yaml")
    assert "nope.yaml" in e.value.line()


@pytest.mark.parametrize("conf, expect", [
    ("{flushDiskType: SYNC_FLUSHH}", "flushDiskType must be one of SYNC_FLUSH, ASYNC_FLUSH (got 'SYNC_FLUSHH'); "
                                     "did you mean SYNC_FLUSH?"),
    ("{brokerRole: SYNC_MASTR}", "brokerRole must be one of ASYNC_MASTER, SYNC_MASTER, SLAVE (got 'SYNC_MASTR')"),
    ("{syncFlushTimeout: 99999999999}", "syncFlushTimeout must be within -2147483648..2147483647 (a Java int)"),
])
def test_broker_conf_value_the_broker_would_not_take_is_an_error(conf: str, expect: str) -> None:
    e = err(f"name: x\ncluster:\n  broker_defaults:\n    config: {conf}\n")
    assert e.lines[0].startswith("t.yaml:4: cluster.broker_defaults.config.") and expect in e.lines[0], e.lines


@pytest.mark.parametrize("brokers, expect", [
    ("[{name: a, port: 65535}]", "cluster.brokers[0].port: port 65535 also needs port+1 (65536, HA), beyond 65535"),
    ("[{name: a, port: 65532, slave: {}}]", "cluster.brokers[0].slave.port: the slave's default port 65537 "
                                            "(its master's + 5) is beyond 65535"),
    ("[{name: a, port: 80}]", "cluster.brokers[0].port: Input should be greater than or equal to 1024"),
])
def test_ports_and_derived_ports_stay_within_range(brokers: str, expect: str) -> None:
    e = err(f"name: x\ncluster:\n  brokers: {brokers}\n")
    assert expect in e.lines[0], e.lines


def test_broker_reported_values_compare_by_type() -> None:
    from cluster.node import same_value
    assert same_value(True, "true") and not same_value(True, "false")
    assert same_value(256, "256") and same_value(0.5, "0.5") and not same_value(4, "256")
    assert same_value("SYNC_FLUSH", "SYNC_FLUSH") and not same_value("SYNC_FLUSHH", "ASYNC_FLUSH")


def test_producers_route_refresh_is_the_java_clients_default_and_bounded() -> None:
    """load.route_refresh: how long a producer keeps a topic's route (pollNameServerInterval, 30 s)."""
    assert parse_scenario("name: x\nload: {}\n", "t.yaml").load.route_refresh == 30.0
    assert parse_scenario("name: x\nload: {route_refresh: 5s}\n", "t.yaml").load.route_refresh == 5.0
    e = err("name: x\nload:\n  route_refresh: 500ms\n")
    assert e.lines == ["t.yaml:3: load.route_refresh: Input should be greater than or equal to 1 (got '500ms')"]
