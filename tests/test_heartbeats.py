"""The heartbeat tap's parsing (cluster/watch/heartbeats.py) on pcap streams built here with dpkt, and the
monitor's use of what it captured (cluster/watch/groups.py). The tap on a real controller-mode cluster is
in tests/test_failover_run.py (the monitor's record of a switch)."""
from __future__ import annotations

import io
import socket

import dpkt
import pytest

from cluster.watch.groups import GroupPlan, ReplicaAnswer, group_record
from cluster.watch.heartbeats import BROKER_HEARTBEAT, Heartbeat, HeartbeatParser, capture_filter
from rmqclient.controllers import ReplicaGroup
from rmqclient.frame import FLAG_ONEWAY, FLAG_RESPONSE, Frame, encode_frame

pytestmark = pytest.mark.fast

BROKER, CTL = ("127.0.99.12", 40001), ("127.0.99.3", 28878)


def heartbeat(confirm: int, max_offset: int, addr: str = "127.0.99.12:28915", flag: int = FLAG_ONEWAY) -> bytes:
    return encode_frame(Frame(code=BROKER_HEARTBEAT, flag=flag, ext={
        "brokerAddr": addr, "brokerName": "broker-a", "epoch": 2, "maxOffset": max_offset,
        "confirmOffset": confirm, "brokerId": 1}))


def segment(seq: int, data: bytes = b"", flags: int = dpkt.tcp.TH_ACK | dpkt.tcp.TH_PUSH,
            src: tuple[str, int] = BROKER) -> bytes:
    tcp = dpkt.tcp.TCP(sport=src[1], dport=CTL[1], seq=seq, flags=flags, data=data)
    ip = dpkt.ip.IP(src=socket.inet_aton(src[0]), dst=socket.inet_aton(CTL[0]), p=dpkt.ip.IP_PROTO_TCP, data=tcp)
    ip.len = len(bytes(ip))
    return bytes(dpkt.ethernet.Ethernet(src=b"\0" * 6, dst=b"\0" * 6, type=dpkt.ethernet.ETH_TYPE_IP, data=ip))


def pcap(packets: list[tuple[float, bytes]]) -> bytes:
    out = io.BytesIO()
    w = dpkt.pcap.Writer(out, linktype=dpkt.pcap.DLT_EN10MB)
    for ts, buf in packets:
        w.writepkt(buf, ts)
    return out.getvalue()


def parse(packets: list[tuple[float, bytes]]) -> list[Heartbeat]:
    return list(HeartbeatParser().pcap(io.BytesIO(pcap(packets))))


def test_a_heartbeat_is_read_with_the_offsets_the_broker_sent_and_when() -> None:
    hb = heartbeat(1000, 1500)
    other = encode_frame(Frame(code=1006, opaque=3))  # the monitor's own ask of a controller: not a heartbeat
    answer = heartbeat(1, 1, flag=FLAG_RESPONSE)
    got = parse([(100.25, segment(1, hb + other)), (100.5, segment(1 + len(hb + other), answer))])
    assert got == [Heartbeat(100250, "127.0.99.12:28915", 2, 1500, 1000)]


def test_a_heartbeat_split_over_segments_and_one_sharing_a_segment_are_each_read_once() -> None:
    a, b, c = heartbeat(10, 20), heartbeat(30, 40), heartbeat(50, 60)
    stream = a + b + c
    cut1, cut2 = 7, len(a) + len(b) + 5  # inside a's length field; inside c
    got = parse([(1.0, segment(0, flags=dpkt.tcp.TH_SYN)),
                 (1.1, segment(1, stream[:cut1])), (1.2, segment(1 + cut1, stream[cut1:cut2])),
                 (1.3, segment(1 + cut2, stream[cut2:]))])
    assert [(h.confirm_offset, h.at_ms) for h in got] == [(10, 1200), (30, 1200), (50, 1300)]


def test_a_retransmitted_heartbeat_is_not_taken_as_a_new_one() -> None:
    """Under a cut the kernel resends what the controller did not ack: the capture sees it again,
    after newer heartbeats were sent; it is skipped, whole or in part."""
    a, b = heartbeat(10, 20), heartbeat(30, 40)
    got = parse([(1.0, segment(1, a)), (2.0, segment(1 + len(a), b)),
                 (3.0, segment(1, a)),                      # a again, whole
                 (3.5, segment(1 + len(a) - 4, a[-4:] + b))])  # a's tail and b again
    assert [(h.confirm_offset, h.at_ms) for h in got] == [(10, 1000), (30, 2000)]


def test_after_bytes_the_capture_missed_the_flow_resumes_at_the_next_segment_that_starts_a_frame() -> None:
    a, b, c, d = heartbeat(10, 20), heartbeat(30, 40), heartbeat(50, 60), heartbeat(70, 80)
    # b's first 4 bytes (its length) were never captured: its rest would read as a frame of some
    # 4 GiB or of a plausible length, swallowing c; c starts the next segment and is read
    for lost in (4, 1):
        got = parse([(1.0, segment(1, a)), (2.0, segment(1 + len(a) + lost, b[lost:])),
                     (3.0, segment(1 + len(a) + len(b), c))])
        assert [h.confirm_offset for h in got] == [10, 50], lost
    # a connection opened before the capture, picked up mid-frame: read from its next frame
    got = parse([(1.0, segment(1 + 20, (c + d)[20:])), (2.0, segment(1 + len(c + d), a))])
    assert [h.confirm_offset for h in got] == [10]


def test_sequence_numbers_wrap() -> None:
    a, b = heartbeat(10, 20), heartbeat(30, 40)
    start = (1 << 32) - 5
    got = parse([(1.0, segment(start, a)), (2.0, segment((start + len(a)) % (1 << 32), b))])
    assert [h.confirm_offset for h in got] == [10, 30]


def test_the_capture_filter_names_each_controllers_address_and_port() -> None:
    assert capture_filter(["127.0.68.3:21478", "127.0.68.4:21479"]) == (
        "tcp and ((dst host 127.0.68.3 and dst port 21478) or (dst host 127.0.68.4 and dst port 21479))")


def test_the_groups_record_takes_a_confirm_offset_sent_within_3_s_and_no_older() -> None:
    g = GroupPlan("broker-a", "controller", [("broker-a-0", "127.0.62.11:28911"), ("broker-a-1", "127.0.62.12:28915")])
    ctl = {"broker-a": ReplicaGroup("127.0.62.11:28911", 1, 3, ["127.0.62.11:28911", "127.0.62.12:28915"], [])}
    hbs = {"127.0.62.11:28911": Heartbeat(10_000, "127.0.62.11:28911", 3, 900, 800),
           "127.0.62.12:28915": Heartbeat(6_000, "127.0.62.12:28915", 3, 700, 650)}
    rec = group_record(g, ctl, {0: "127.0.62.11:28911"},
                       {"broker-a-0": ReplicaAnswer("master", 900), "broker-a-1": ReplicaAnswer("slave", 700)}, hbs, 10_500)
    assert (rec["master"], rec["epoch"]) == ("broker-a-0", 3)
    assert rec["replicas"]["broker-a-0"] == {"up": True, "role": "master", "max_offset": 900,
                                             "confirm_offset": 800, "confirm_ms": 10_000}
    # 4.5 s old: that node has not reported since (stopped, dead or cut off)
    assert (rec["replicas"]["broker-a-1"]["confirm_offset"], rec["replicas"]["broker-a-1"]["confirm_ms"]) == (None, None)
    # a classic group has no controllers to heartbeat to: no confirm offset, and no confirm_ms key
    c = GroupPlan("broker-b", "classic", [("broker-b", "127.0.62.11:28911")])
    assert group_record(c, None, {0: "127.0.62.11:28911"}, {"broker-b": ReplicaAnswer("master", 900)}, hbs,
                        10_500)["replicas"]["broker-b"] == {"up": True, "role": "master", "max_offset": 900,
                                                            "confirm_offset": None}


def test_a_capture_that_ends_says_so_and_keeps_what_it_read(tmp_path) -> None:
    """A tcpdump that exits (here: a stand-in that writes one heartbeat's pcap and exits 3) leaves the
    heartbeats it delivered and an error naming its exit, which each monitor sample then carries."""
    import subprocess
    import sys

    from cluster.watch.heartbeats import HeartbeatTap
    from rmqchaos.machine.wait import poll_until
    f = tmp_path / "one.pcap"
    f.write_bytes(pcap([(5.0, segment(1, heartbeat(70, 80)))]))
    tap = HeartbeatTap(["127.0.99.3:28878"], lambda cmd: subprocess.Popen(
        [sys.executable, "-c", f"import sys; sys.stdout.buffer.write(open({str(f)!r}, 'rb').read()); sys.exit(3)"],
        stdout=subprocess.PIPE))
    assert tap.start()
    poll_until(lambda: tap.error, 10, "the tap to see its capture end")
    assert tap.error is not None and "exit code 3" in tap.error and "output ended" in tap.error, tap.error
    assert tap.latest() == {"127.0.99.12:28915": Heartbeat(5000, "127.0.99.12:28915", 2, 80, 70)}
