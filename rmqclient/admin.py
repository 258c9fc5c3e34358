"""Blocking admin calls over the remoting protocol: namesrv cluster info, routes, topic creation.

One request at a time per connection; responses are matched by the frame's opaque (request id).
Request codes and header fields: rocketmq-remoting RequestCode.java and protocol/header/*.
"""
from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass
from typing import Any

import gevent.socket as socket  # cooperative under gevent (Locust), plain blocking calls elsewhere

from rmqclient.frame import Frame, FrameError, FrameReader, encode_frame

GET_ROUTEINFO_BY_TOPIC = 105
GET_BROKER_CLUSTER_INFO = 106
UPDATE_AND_CREATE_TOPIC = 17
GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
GET_CONSUMER_CONNECTION_LIST = 203
DELETE_SUBSCRIPTIONGROUP = 207
DELETE_TOPIC_IN_BROKER = 215
DELETE_TOPIC_IN_NAMESRV = 216
QUERY_CONSUMER_OFFSET = 14
GET_MAX_OFFSET = 30
GET_MIN_OFFSET = 31
GET_BROKER_CONFIG = 26  # RequestCode.GET_BROKER_CONFIG: the broker's effective config, as properties text
GET_ALL_TOPIC_CONFIG = 21  # the broker's topicConfigTable (TopicConfigSerializeWrapper as JSON)
GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201  # the broker's subscriptionGroupTable
GET_ALL_CONSUMER_OFFSET = 43  # the broker's consumer offsets (ConsumerOffsetManager as JSON: offsetTable)
HEART_BEAT = 34  # a client's heartbeat: its consumer groups (HeartbeatData as JSON)
GET_BROKER_RUNTIME_INFO = 28  # KVTable: the broker's runtime stats (scheduleMessageOffset_<level> among them)
QUERY_NOT_FOUND = 22
SUCCESS = 0
TOPIC_NOT_EXIST = 17
PERM_READ_WRITE = 6  # PermName.PERM_READ | PERM_WRITE


class RemotingError(Exception):
    """A request that got no usable answer: connection refused/closed, timeout, or an error code."""

    def __init__(self, message: str, code: int | None = None, remark: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.remark = remark


@dataclass(frozen=True)
class BrokerInfo:
    cluster: str
    name: str
    addrs: dict[int, str]  # brokerId -> "host:port"; 0 is the master


def _split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


class Connection:
    _opaque = itertools.count(1)

    def __init__(self, addr: str, timeout: float = 3.0, source: str | None = None) -> None:
        self.addr = addr
        self.timeout = timeout
        try:  # from `source` (a client's own loopback address, so a network rule can name it)
            self._sock = socket.create_connection(_split_addr(addr), timeout=timeout,
                                                  source_address=(source, 0) if source else None)
        except OSError as e:
            raise RemotingError(f"cannot connect to {addr}: {e.strerror or e}") from None
        self._reader = FrameReader()
        self._pending: list[Frame] = []

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, code: int, ext: dict[str, Any] | None = None, body: bytes = b"",
                timeout: float | None = None) -> Frame:
        opaque = next(self._opaque)
        req = Frame(code=code, opaque=opaque, ext={k: _str(v) for k, v in (ext or {}).items() if v is not None},
                    body=body)
        deadline = time.monotonic() + (timeout or self.timeout)
        try:
            self._sock.sendall(encode_frame(req))
            while True:
                for f in self._pending:
                    if f.opaque == opaque and f.is_response:
                        self._pending.remove(f)
                        return f
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RemotingError(f"timeout waiting for {self.addr} (request code {code})")
                self._sock.settimeout(left)
                data = self._sock.recv(65536)
                if not data:
                    raise RemotingError(f"connection to {self.addr} closed (request code {code})")
                self._pending.extend(self._reader.feed(data))
        except socket.timeout:
            raise RemotingError(f"timeout waiting for {self.addr} (request code {code})") from None
        except FrameError as e:
            raise RemotingError(f"bad frame from {self.addr}: {e}") from None
        except OSError as e:
            raise RemotingError(f"connection to {self.addr} failed: {e.strerror or e}") from None


def _str(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def offset_table(doc: dict[str, Any]) -> dict[str, dict[int, int]]:
    """ConsumerOffsetManager's JSON (GET_ALL_CONSUMER_OFFSET's body, or consumerOffset.json) as
    "topic@group" -> {queue id: offset}."""
    return {k: {int(q): int(o) for q, o in (v or {}).items()} for k, v in (doc.get("offsetTable") or {}).items()}


class AdminClient:
    """Admin calls the platform needs. `namesrv` is "host:port" (several separated by ';')."""

    def __init__(self, namesrv: str, timeout: float = 3.0, source: str | None = None) -> None:
        self.namesrv_addrs = [a for a in namesrv.split(";") if a]
        self.timeout = timeout
        self.source = source  # the address connections come from (None: the kernel's choice, 127.0.0.1)

    def _namesrv_request(self, code: int, ext: dict[str, Any] | None = None) -> Frame:
        last: RemotingError | None = None
        for addr in self.namesrv_addrs:
            try:
                with Connection(addr, self.timeout, self.source) as c:
                    return c.request(code, ext)
            except RemotingError as e:
                last = e
        assert last is not None
        raise last

    def cluster_info(self) -> list[BrokerInfo]:
        resp = self._namesrv_request(GET_BROKER_CLUSTER_INFO)
        check_answer(resp, "GET_BROKER_CLUSTER_INFO")
        data = resp.body_json() if resp.body else {}
        out = []
        for name, bd in (data.get("brokerAddrTable") or {}).items():
            out.append(BrokerInfo(cluster=bd.get("cluster", ""), name=name,
                                  addrs={int(k): v for k, v in (bd.get("brokerAddrs") or {}).items()}))
        return sorted(out, key=lambda b: b.name)

    def topic_route(self, topic: str, missing_ok: bool = True) -> dict[str, Any] | None:
        """The route of a topic. When namesrv does not know it (code 17): None, or with
        missing_ok=False a RemotingError carrying namesrv's code and remark verbatim."""
        resp = self._namesrv_request(GET_ROUTEINFO_BY_TOPIC, {"topic": topic, "acceptStandardJsonOnly": True})
        if resp.code == TOPIC_NOT_EXIST:
            if missing_ok:
                return None
            raise RemotingError(f"namesrv has no route for topic {topic}", resp.code, resp.remark)
        check_answer(resp, "GET_ROUTEINFO_BY_TOPIC")
        return resp.body_json()

    def topic_list(self) -> list[str]:
        resp = self._namesrv_request(GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        check_answer(resp, "GET_ALL_TOPIC_LIST_FROM_NAMESERVER")
        return sorted((resp.body_json() or {}).get("topicList") or [])

    def master_addrs(self, cluster: str | None = None) -> dict[str, str]:
        """brokerName -> master address, from namesrv's cluster info."""
        return {b.name: b.addrs[0] for b in self.cluster_info() if 0 in b.addrs and (cluster is None or
                                                                                    b.cluster == cluster)}

    def _broker(self, addr: str, code: int, ext: dict[str, Any], what: str, body: bytes = b"") -> Frame:
        with Connection(addr, self.timeout, self.source) as c:
            resp = c.request(code, ext, body)
        check_answer(resp, f"{what} on {addr}")
        return resp

    def broker_config(self, broker_addr: str) -> dict[str, str]:
        """The broker's effective configuration (every key of its config objects, as it runs), as
        `mqadmin getBrokerConfig` reads it: the body is `key=value` lines."""
        resp = self._broker(broker_addr, GET_BROKER_CONFIG, {}, "GET_BROKER_CONFIG")
        out: dict[str, str] = {}
        for line in (resp.body or b"").decode("utf-8", errors="replace").splitlines():
            k, sep, v = line.partition("=")
            if sep and k.strip() and not k.lstrip().startswith("#"):
                out[k.strip()] = v.strip()
        return out

    def create_topic(self, broker_addr: str, topic: str, queues: int = 4, perm: int = PERM_READ_WRITE,
                     attributes: dict[str, str] | None = None) -> None:
        """`attributes` (e.g. {"message.type": "NORMAL"}) go as mqadmin's `-a +message.type=NORMAL`
        (CreateTopicRequestHeader.attributes: '+key=value' joined by ',', '+' = add)."""
        ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues, "writeQueueNums": queues,
               "perm": perm, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}
        if attributes:
            ext["attributes"] = ",".join(f"+{k}={v}" for k, v in sorted(attributes.items()))
        self._broker(broker_addr, UPDATE_AND_CREATE_TOPIC, ext, f"UPDATE_AND_CREATE_TOPIC {topic}")

    def create_topic_everywhere(self, topic: str, queues: int = 4, cluster: str | None = None,
                                attributes: dict[str, str] | None = None) -> list[str]:
        """Create `topic` on every master (as `mqadmin updateTopic -c`). Returns the broker names."""
        masters = self.master_addrs(cluster)
        for addr in masters.values():
            self.create_topic(addr, topic, queues, attributes=attributes)
        return sorted(masters)

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        """Delete on every master, then from namesrv (as `mqadmin deleteTopic`)."""
        for addr in self.master_addrs(cluster).values():
            self.delete_topic_in_broker(addr, topic)
        self.delete_topic_in_namesrv(topic, cluster)

    def create_group(self, group: str, retry_max_times: int = 16, cluster: str | None = None) -> None:
        """Create a subscription group on every master (SubscriptionGroupConfig as JSON body)."""
        body = json.dumps({"groupName": group, "consumeEnable": True, "consumeFromMinEnable": True,
                           "consumeBroadcastEnable": True, "retryQueueNums": 1, "retryMaxTimes": retry_max_times,
                           "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True,
                           "groupSysFlag": 0, "consumeTimeoutMinute": 15}).encode()
        for addr in self.master_addrs(cluster).values():
            self._broker(addr, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, f"create group {group}", body)

    def delete_group(self, group: str, clean_offset: bool = True, cluster: str | None = None) -> None:
        for addr in self.master_addrs(cluster).values():
            self._broker(addr, DELETE_SUBSCRIPTIONGROUP, {"groupName": group, "cleanOffset": clean_offset},
                         f"delete group {group}")

    def consumer_lag(self, group: str, topics: list[str], brokers: set[str] | None = None,
                     skip: set[str] | None = None) -> dict[str, int]:
        """"broker/topic/queue" -> messages stored but not yet consumed by `group` (the broker's max
        offset minus the group's committed offset; the Java consumer commits every 5 s), for every
        readable queue that namesrv routes now. Raises RemotingError if a broker does not answer, or
        if one of `brokers` (group names) has no master in a topic's route: a dead broker drops out
        of the route, and its stored messages are out of reach, not consumed. `skip`: broker groups
        left out (known dead), routed or not."""
        out: dict[str, int] = {}
        for topic in topics:
            route = self.topic_route(topic) or {}
            masters = {bd["brokerName"]: bd["brokerAddrs"].get("0") for bd in route.get("brokerDatas", [])}
            missing = sorted((brokers or set()) - {b for b, addr in masters.items() if addr})
            if missing:
                raise RemotingError(f"{', '.join(missing)} not in the route of {topic}: lag unknown")
            for q in route.get("queueDatas", []):
                addr = masters.get(q["brokerName"])
                if not addr or q["brokerName"] in (skip or ()):
                    continue
                got = self.offsets(addr, group, [(topic, qid) for qid in range(q["readQueueNums"])])
                for (_, qid), (mx, consumed) in got.items():
                    out[f"{q['brokerName']}/{topic}/{qid}"] = max(0, mx - consumed)
        return out

    def topic_configs(self, broker_addr: str) -> dict[str, dict[str, Any]]:
        """Every topic the broker holds (its topicConfigTable: what it registers to namesrv)."""
        return self.topic_table(broker_addr)[0]

    def topic_table(self, broker_addr: str) -> tuple[dict[str, dict[str, Any]], dict[str, Any] | None]:
        """The broker's topicConfigTable and its dataVersion (a slave takes its master's dataVersion
        when it syncs the table: equal versions = the slave has synced the master's current table)."""
        resp = self._broker(broker_addr, GET_ALL_TOPIC_CONFIG, {}, "GET_ALL_TOPIC_CONFIG")
        body = resp.body_json() or {}
        return dict(body.get("topicConfigTable") or {}), body.get("dataVersion")

    def topic_count(self, broker_addr: str) -> tuple[int, dict[str, dict[str, Any]] | None]:
        """How many topics the broker holds, asked cheaply: a page of one topic (GET_ALL_TOPIC_CONFIG
        with topicSeq/maxTopicNum), which 5.5.0 answers with the page and the total in the header's
        `totalTopicNum` (enableSplitMetadata, on by default; AdminBrokerProcessor.getAllTopicConfig).
        A broker that answers with its whole table (5.3.3 and older, or enableSplitMetadata=false)
        gives that too: (count, table); else (count, None)."""
        resp = self._broker(broker_addr, GET_ALL_TOPIC_CONFIG, {"topicSeq": 0, "maxTopicNum": 1}, "GET_ALL_TOPIC_CONFIG")
        table = dict((resp.body_json() or {}).get("topicConfigTable") or {})
        total = resp.ext.get("totalTopicNum")
        if total is None or int(total) == len(table):
            return len(table), table
        return int(total), None

    def group_configs(self, broker_addr: str) -> dict[str, dict[str, Any]]:
        """Every subscription group the broker holds."""
        resp = self._broker(broker_addr, GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {}, "GET_ALL_SUBSCRIPTIONGROUP_CONFIG")
        return dict((resp.body_json() or {}).get("subscriptionGroupTable") or {})

    def consumer_offsets(self, broker_addr: str) -> dict[str, dict[int, int]]:
        """The broker's consumer offsets as it holds them now: "topic@group" -> {queue id: offset}."""
        resp = self._broker(broker_addr, GET_ALL_CONSUMER_OFFSET, {}, "GET_ALL_CONSUMER_OFFSET")
        return offset_table(resp.body_json() or {})

    def consumer_heartbeat(self, broker_addr: str, client_id: str, groups: list[str], topic: str) -> None:
        """One heartbeat of a push consumer in each of `groups` subscribed to `topic`, as the Java
        client sends it. The broker creates each unknown group (autoCreateSubscriptionGroup) and its
        %RETRY%<group> topic (ClientManageProcessor.heartBeat), which stay when the client goes away."""
        sub = {"topic": topic, "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 0,
               "expressionType": "TAG", "classFilterMode": False}
        body = json.dumps({"clientID": client_id, "producerDataSet": [], "consumerDataSet": [
            {"groupName": g, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
             "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "subscriptionDataSet": [sub], "unitMode": False}
            for g in groups]}).encode()
        self._broker(broker_addr, HEART_BEAT, {}, f"HEART_BEAT ({len(groups)} groups)", body)

    def delete_topic_in_broker(self, broker_addr: str, topic: str) -> None:
        self._broker(broker_addr, DELETE_TOPIC_IN_BROKER, {"topic": topic}, f"DELETE_TOPIC_IN_BROKER {topic}")

    def delete_topic_in_namesrv(self, topic: str, cluster: str | None = None) -> None:
        self._namesrv_checked(DELETE_TOPIC_IN_NAMESRV, {"topic": topic, "clusterName": cluster},
                              f"DELETE_TOPIC_IN_NAMESRV {topic}")

    def online_groups(self, broker_addr: str, groups: list[str]) -> set[str]:
        """Those of `groups` with at least one consumer connected to the broker now."""
        with Connection(broker_addr, self.timeout, self.source) as c:
            return {g for g in groups if _client_ids(c, g)}

    def consumer_client_ids(self, broker_addr: str, group: str) -> list[str]:
        """The client ids of `group`'s consumers connected to the broker now."""
        with Connection(broker_addr, self.timeout, self.source) as c:
            return _client_ids(c, group)

    def offsets(self, broker_addr: str, group: str, queues: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """(topic, queue) -> (max offset, `group`'s committed offset, 0 when it has none), over one
        connection to the broker."""
        out = {}
        with Connection(broker_addr, self.timeout, self.source) as c:
            for topic, q in queues:
                mx = c.request(GET_MAX_OFFSET, {"topic": topic, "queueId": q})
                check_answer(mx, f"GET_MAX_OFFSET {topic}/{q} on {broker_addr}")
                co = c.request(QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": q})
                if co.code not in (SUCCESS, QUERY_NOT_FOUND):
                    check_answer(co, f"QUERY_CONSUMER_OFFSET {topic}/{q} on {broker_addr}")
                out[(topic, q)] = (int(mx.ext.get("offset", 0)), int(co.ext.get("offset", 0)) if co.code == SUCCESS else 0)
        return out

    def queue_spans(self, broker_addr: str, topic: str, queues: int) -> dict[int, tuple[int, int]]:
        """queue id -> (min offset, max offset) of the broker's own consume queues of the topic
        (GET_MIN_OFFSET / GET_MAX_OFFSET, as `mqadmin topicStatus` per broker), over one connection."""
        out = {}
        with Connection(broker_addr, self.timeout, self.source) as c:
            for q in range(queues):
                got = []
                for code, what in ((GET_MIN_OFFSET, "GET_MIN_OFFSET"), (GET_MAX_OFFSET, "GET_MAX_OFFSET")):
                    r = c.request(code, {"topic": topic, "queueId": q})
                    check_answer(r, f"{what} {topic}/{q} on {broker_addr}")
                    got.append(int(r.ext.get("offset", 0)))
                out[q] = (got[0], got[1])
        return out

    def runtime_info(self, broker_addr: str) -> dict[str, str]:
        """The broker's runtime stats (GET_BROKER_RUNTIME_INFO, as `mqadmin brokerStatus`)."""
        resp = self._broker(broker_addr, GET_BROKER_RUNTIME_INFO, {}, "GET_BROKER_RUNTIME_INFO")
        return {str(k): str(v) for k, v in ((resp.body_json() or {}).get("table") or {}).items()}

    def _namesrv_checked(self, code: int, ext: dict[str, Any], what: str) -> Frame:
        resp = self._namesrv_request(code, ext)
        check_answer(resp, what)
        return resp


def _client_ids(c: Connection, group: str) -> list[str]:
    """GET_CONSUMER_CONNECTION_LIST; a group with no live consumer on the broker answers 206: []."""
    resp = c.request(GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})
    if resp.code != SUCCESS or not resp.body:
        return []
    return sorted(x.get("clientId", "") for x in (resp.body_json() or {}).get("connectionSet") or [])


def check_answer(resp: Frame, what: str) -> None:
    if resp.code != SUCCESS:
        raise RemotingError(f"{what} failed: code {resp.code} {resp.remark or ''}".rstrip(), resp.code, resp.remark)
