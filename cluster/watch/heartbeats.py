"""What each controller-mode broker last told the controllers of itself: its confirm offset.

RocketMQ 5.x answers no admin request with a store's confirm offset (docs/broker-evidence.md). A
controller-mode broker sends it, with its max offset and epoch, in BROKER_HEARTBEAT (904), oneway
to every controller once a second (ReplicasManager.sendHeartbeatToController,
MessageStore.getConfirmOffset). The monitor reads those requests off the loopback interface as
they are sent: tcpdump captures, filtered in the kernel to the controllers' listening addresses,
and its pcap stream is parsed here (dpkt for the packets, rmqclient.frame for the remoting frames).

What is recorded is what the node sent, whether or not a controller received it (a partition's
rules drop it after the capture). Per TCP flow the bytes are taken in sequence order: a segment
already seen (a retransmission under a cut) is skipped, so an old heartbeat never looks new; a gap
(a packet the capture dropped) restarts the flow's frame reader at the next segment that starts a
frame.
"""
from __future__ import annotations

import shutil
import struct
import subprocess
import threading
from dataclasses import dataclass
from typing import IO, Callable, Iterable

import dpkt

from rmqclient.frame import JSON_TYPE, MAX_FRAME, ROCKETMQ_TYPE, Frame, FrameError, FrameReader

BROKER_HEARTBEAT = 904
_SEQ = 1 << 32


@dataclass(frozen=True)
class Heartbeat:
    at_ms: int  # when it was captured (wall clock, as the monitor's ts_ms)
    broker_addr: str
    epoch: int | None
    max_offset: int | None
    confirm_offset: int | None


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def heartbeat_of(frame: Frame, at_ms: int) -> Heartbeat | None:
    """The heartbeat a frame carries, if it is one (a request, code 904, with a brokerAddr)."""
    if frame.code != BROKER_HEARTBEAT or frame.is_response or not frame.ext.get("brokerAddr"):
        return None
    e = frame.ext
    return Heartbeat(at_ms, e["brokerAddr"], _int(e.get("epoch")), _int(e.get("maxOffset")),
                     _int(e.get("confirmOffset")))


def starts_a_frame(data: bytes) -> bool:
    """Whether bytes look like the start of a remoting frame: a length that covers the header word
    and the header, serialize type JSON (then the header opens with `{`) or ROCKETMQ."""
    if len(data) < 9:
        return False
    n, word = struct.unpack_from(">II", data, 0)
    stype, hlen = word >> 24, word & 0xFFFFFF
    return 4 <= 4 + hlen <= n <= MAX_FRAME and (stype == ROCKETMQ_TYPE or stype == JSON_TYPE and data[8:9] == b"{")


class _Flow:
    """One direction of one TCP connection: its bytes in sequence order, as remoting frames. A flow
    seen from its SYN is in step with its frames from the first byte; one picked up mid-connection,
    or after bytes the capture missed, waits for a segment that starts a frame."""

    def __init__(self, next_seq: int, synced: bool) -> None:
        self.next_seq, self.synced, self.reader = next_seq, synced, FrameReader()

    def feed(self, seq: int, data: bytes) -> list[Frame]:
        ahead = (seq - self.next_seq) % _SEQ
        if ahead >= _SEQ // 2:  # starts before what was taken: a retransmission, or its new tail
            skip = (self.next_seq - seq) % _SEQ
            if skip >= len(data):
                return []
            data, seq = data[skip:], self.next_seq
        elif ahead:  # bytes the capture missed: the frame in progress is lost
            self.synced = False
        self.next_seq = (seq + len(data)) % _SEQ
        if not self.synced:
            if not starts_a_frame(data):
                return []
            self.synced, self.reader = True, FrameReader()
        try:
            return self.reader.feed(data)
        except FrameError:  # not frames after all: wait for a segment that starts one
            self.synced = False
            return []


class HeartbeatParser:
    """Heartbeats from the TCP segments of a pcap stream (Ethernet framing, as tcpdump gives on lo)."""

    def __init__(self) -> None:
        self.flows: dict[tuple[bytes, int, bytes, int], _Flow] = {}

    def packet(self, ts: float, buf: bytes) -> list[Heartbeat]:
        ip = dpkt.ethernet.Ethernet(buf).data
        if not isinstance(ip, dpkt.ip.IP) or not isinstance(ip.data, dpkt.tcp.TCP):
            return []
        tcp = ip.data
        key = (ip.src, tcp.sport, ip.dst, tcp.dport)
        if tcp.flags & dpkt.tcp.TH_SYN:  # a new connection: a new stream
            self.flows[key] = _Flow((tcp.seq + 1) % _SEQ, synced=True)
            return []
        out: list[Heartbeat] = []
        if tcp.data:
            flow = self.flows.get(key)
            if flow is None:  # a connection opened before the capture: taken from its first segment seen
                flow = self.flows[key] = _Flow(tcp.seq, synced=False)
            out = [h for f in flow.feed(tcp.seq, bytes(tcp.data)) if (h := heartbeat_of(f, int(ts * 1000)))]
        if tcp.flags & (dpkt.tcp.TH_FIN | dpkt.tcp.TH_RST):
            self.flows.pop(key, None)
        return out

    def pcap(self, stream: IO[bytes]) -> Iterable[Heartbeat]:
        """Every heartbeat of a pcap stream, as it is read (blocks on a pipe until tcpdump ends)."""
        for ts, buf in dpkt.pcap.Reader(stream):
            try:
                yield from self.packet(ts, buf)
            except (dpkt.UnpackError, ValueError):  # a truncated or foreign packet: not ours to read
                continue


def capture_filter(controllers: list[str]) -> str:
    """The kernel's filter: TCP to any controller's listening address:port."""
    return "tcp and (" + " or ".join(f"(dst host {a.rsplit(':', 1)[0]} and dst port {a.rsplit(':', 1)[1]})"
                                     for a in controllers) + ")"


class HeartbeatTap:
    """tcpdump on lo for the controllers' traffic, read by a thread into the last heartbeat of each
    broker address. `spawn(cmd)` starts it with its stdout a pipe (the monitor: the backend's
    spawn_client, so `down` ends it by PID, and it dies with the monitor)."""

    def __init__(self, controllers: list[str], spawn: Callable[[list[str]], subprocess.Popen]) -> None:
        self.controllers, self._spawn = controllers, spawn
        self.proc: subprocess.Popen | None = None
        self.error: str | None = None
        self._latest: dict[str, Heartbeat] = {}
        self._lock = threading.Lock()

    def start(self) -> bool:
        """Whether the capture started; when it did not, `error` says why."""
        exe = shutil.which("tcpdump", path="/usr/bin:/usr/sbin:/sbin:/bin")
        if exe is None:
            self.error = "tcpdump is not installed: confirm offsets are not recorded (scripts/setup.sh installs it)"
            return False
        # -U --immediate-mode: each packet as it comes, not a buffer's worth later; -s 0: whole packets
        self.proc = self._spawn([exe, "-i", "lo", "-nn", "-s", "0", "-U", "--immediate-mode", "-w", "-",
                                 capture_filter(self.controllers)])
        threading.Thread(target=self._read, name="heartbeats", daemon=True).start()
        return True

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            for hb in HeartbeatParser().pcap(self.proc.stdout):
                with self._lock:
                    self._latest[hb.broker_addr] = hb
            why = "its output ended"
        except (ValueError, dpkt.NeedData) as e:  # tcpdump wrote no pcap header, or a torn one
            why = f"{type(e).__name__}: {e}"
        try:
            code: int | None = self.proc.wait(5)  # its output ends as it exits
        except subprocess.TimeoutExpired:
            code = None
        self.error = f"the heartbeat capture ended ({why}; tcpdump exit code {code}, monitor/tcpdump.log)"

    def latest(self) -> dict[str, Heartbeat]:
        with self._lock:
            return dict(self._latest)
