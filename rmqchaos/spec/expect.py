"""The `expect:` section: the machine-checked signature of "reproduced" for a scenario that
reproduces a known bug (scenarios/upstream/). Conditions on named figures of the run's summary
(`lost > 0`), on probes of the live cluster taken before it stops (a topic absent from a node's
topic config table) and on a fault's failover (no new master within N s of it: summary.failover,
from the monitor's per-second groups record); the run's verdict is "reproduced" when every condition holds
(analysis/judge/expect.py evaluates them, cluster/watch/end_probes.py takes the probes)."""
from __future__ import annotations

import difflib
import re
from typing import Annotated, Any, Iterable, Literal

from pydantic import AfterValidator, Field, model_validator

from rmqchaos.spec.types import Duration, NodeName, Strict, TopicName

# figure name -> its path in analysis/summary.json (dotted; `a - b`: a difference); null (no store
# check) counts as absent
FIGURES = {**{k: f"counts.{k}" for k in ("keys", "attempts", "acked", "acked_weak", "acked_weak_lost", "ok", "lost",
                                         "undelivered_at_stop", "duplicated", "duplicate_deliveries", "recovered",
                                         "failed", "indeterminate", "unexpected", "corrupted_deliveries")},
           **{f"store_check.{k}": f"store_check.{k}" for k in ("lost_from_store", "lost_in_delivery",
                                                                "indeterminate_stored", "indeterminate_not_stored",
                                                                "erased_after_delivery", "lost_in_wheel",
                                                                "lost_truncated")},
           # lost keys that some attempt of got SEND_OK: a loss the broker promised against (a key acked
           # only with FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE was told it was not replicated)
           "lost_send_ok": "counts.lost - counts.acked_weak_lost",
           # keys consumers read from a deposed master: stored by a failover's old master after the
           # new one was elected (analysis/replication/failover.py stale_reads)
           "failover.stale_reads": "failover.stale_reads",
           # queue positions acknowledged to two different keys (analysis/durability/offsets.py)
           "reused_queue_offsets": "reused_queue_offsets.positions"}
# figure families: `<family>.<name>`, a figure per broker, status, outcome, cause or fault the run has
# (analysis/judge/signature.py computes them from the summary); a name the run does not have reads as 0
# where counting makes it so (a status never answered), else as absent
FAMILIES = {
    "busy": "sends refused busy with this text, e.g. busy.PCBUSY_CLEAN_QUEUE (without its brackets)",
    "status": "acked attempts answered with this send status, e.g. status.FLUSH_SLAVE_TIMEOUT",
    "outcome": "attempts with this outcome: ok, timeout, error, no_outcome",
    "duplicates": "extra deliveries of this cause (summary.duplicates_by_cause)",
    "route_absent_samples": "monitor samples in which this broker answered while namesrv did not list it "
                            "(with several namesrvs: while none listed it)",
    "route_absent_seconds": "seconds this broker answered while no namesrv listed it (monitor samples to the next one)",
    "frames_refused_by": "frames this namesrv refused as too long, e.g. frames_refused_by.namesrv-2",
    "route_back": "1 when this broker, once out of every namesrv's route, was listed again by the last sample that "
                  "reached it; 0 when it stayed out (absent when it never left)",
    "link_p50_added_ms": "the most a link fault added to this broker's acked sends' p50 round trip (ms); `proxy`: the gRPC sends'",
    "lost_on": "lost keys acknowledged by this broker group (the store check's keys), e.g. lost_on.broker-a",
    "gone_on": "keys acknowledged by this broker group and in no store now: lost from the store, or delivered and then erased",
    "gone_status": "the same keys (in no store now) by the status they were acknowledged with, e.g. gone_status.FLUSH_DISK_TIMEOUT",
    "order_broken_on": "sharding keys that broke order, by the broker their first acknowledged message went to, "
                       "e.g. order_broken_on.broker-b",
    "pop": "POP deliveries through the proxy in this class or class.cause (analysis/contracts/pop.py), e.g. "
           "pop.redelivered_after_ack, pop.consumed_but_lost, pop.redelivered_after_ack.after_change; "
           "pop.by_fault.<fault id>; the totals pop.deliveries, pop.acks_ok, pop.acks_refused, pop.changes_ok",
    "log": "lines a RocketMQ node wrote to its own logs that say this (LOG_MARKS), over every node, e.g. "
           "log.inactive_declared",
    "transactions": "half messages of a transactional load in this class (summary.transactions.classes), e.g. "
                    "transactions.rolled_back_delivered, or transactions.checked_after_end / transactions.abandoned",
}
# figures computed from several parts of the summary (analysis/judge/signature.py)
DERIVED = {
    "busy": "sends the broker refused as busy (code 2)",
    "errors_not_busy": "attempts that failed with an answer or a transport error, other than busy refusals",
    "frames_refused": "frames namesrv refused as too long (its remoting.log)",
    "frame_refused_bytes": "the length namesrv's log gives for the last frame it refused as too long (its limit: "
                           "com.rocketmq.remoting.frameMaxLength, 16,777,216 by default)",
    "retried_first_in_batch": "keys redelivered through %RETRY% that were first of their listener batch",
    "retried_later_in_batch": "keys redelivered through %RETRY% that were at index 1..n-1 of their batch",
    "read_again_after_rollback": "deliveries read again because a power loss rolled a broker's consumer offsets back",
    "not_started_after_power_loss": "nodes that did not start again when their power came back (power_loss back_after)",
    "dledger_terms_reused": "DLedger terms in which a group elected a leader twice (its replicas' logs): votes forgotten",
    "dledger_terms_forgotten": "terms DLedger replicas entered again from term 0 after a restart: their term and vote forgotten",
    "two_master_seconds": "seconds in which two nodes of one broker group acknowledged sends as master (summary.failover)",
    "keys_out_of_order": "sharding keys of an ordered load whose deliveries broke its order (summary.order)",
    "order_reordered": "deliveries of an ordered load that came after a higher number of their key (inversions)",
    "order_repeats_out_of_order": "redeliveries of an ordered load that came after a higher number of their key",
    "order_gaps": "acknowledged messages of an ordered load never delivered though a later one of their key was",
    "order_keys_moved": "sharding keys sent to more than one queue (a route or queue-count change moved them)",
    "order_broken_moved": "sharding keys that broke order and had moved to another queue",
    "order_broken_stayed": "sharding keys that broke order on the one queue they were sent to (a redelivery, a rebalance)",
    "timers_early": "acknowledged timer messages first delivered before they were due (summary.timers)",
    "timers_lost": "acknowledged timer messages never delivered, the drain having waited load.timer.wait past the last due time",
    "timers_late_over_5s": "timer messages first delivered more than 5 s after they were due",
    "timers_lost_no_fault": "acknowledged timer messages lost that waited through no fault (e.g. sent after a restart)",
    "timers_late_max_ms": "the most a timer message's first delivery came after its due time (ms)",
    # what a fault did, for a signature's premise: each reads 0 (or None) on a run without the fault
    "attempts_failed": "attempts that failed with an error other than a busy refusal, or timed out "
                       "(errors_not_busy + outcome.timeout): a fault the producers felt",
    "busy_stored": "attempts refused busy whose own message was stored all the same (summary.answers)",
    "end_to_end_max_ms": "the longest a key took from its intended send to its first delivery (ms)",
    "retry_topics_max": "the most %RETRY% topics one broker's topic table held at a monitor sample",
    "consumer_clock_timed_out": "requests a consumer's client gave up as timed out at once when a consumer_clock "
                                "fault stepped its clock (the fault's evidence; 0 without such a fault)",
    "txn_checked_after_fault": "half messages the application had ended that a check-back asked about again after "
                               "a fault on the broker group that stored them, stored before it (its END or op "
                               "record lost to the fault); 0 without a fault on a broker",
    "gone_ok_sync_flush": "keys in no store now that a SYNC_FLUSH broker group acknowledged SEND_OK",
    "gone_in_disk_fault": "keys in no store now that a broker group acknowledged while a disk_error or disk_slow "
                          "fault on its node was in force",
}
# named lines of RocketMQ's own logs (a substring of the line, and what it says), counted per node
# over its logs/rocketmqlogs/*.log by analysis/evidence/log_marks.py: the figure family `log`
LOG_MARKS = {
    "inactive_declared": ("has been inactive", "a controller declared a replica inactive (its heartbeats timed out)"),
    "disk_marked_full": ("so mark disk full", "a broker marked its disk full: it refuses every put"),
    "timer_put_discarded": ("Message processing failed after",
                            "a timer that came due, discarded after its put failed 3 times (5.3.2+)"),
    "timer_offset_clamped": ("is larger than maxOffsetInQueue",
                             "the timer wheel's recovered queue offset clamped to its consume queue (5.3.2+)"),
}
# The names after the dot that the analysis can produce, per family whose names it fixes: one source,
# analysis/ imports these (rules.py, transactions.py, pop.py), so a name that validates is one it counts.
# The other families name a node, broker group or fault id of the scenario (checks.py _condition_errors).
# a stored answer's status (MQClientAPIImpl.processSendResponse, response codes 0/10/12/11; rmqclient STORED_STATUS)
SEND_STATUSES = ("SEND_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE")
# a busy refusal's (code 2) bracketed remark text, RocketMQ's own: BrokerFastFailure (TIMEOUT_, PCBUSY_CLEAN_QUEUE),
# SendMessageProcessor (PC_SYNCHRONIZED), NettyRemotingAbstract (REJECTREQUEST, OVERLOAD); the same in 5.1-5.5
BUSY_TEXTS = ("TIMEOUT_CLEAN_QUEUE", "PCBUSY_CLEAN_QUEUE", "PC_SYNCHRONIZED", "REJECTREQUEST", "OVERLOAD")
# an attempt's outcome (rmqclient SendResult, GrpcProducer); `no_outcome`: an intent never answered (analysis/reconcile/answers.py)
OUTCOMES = ("ok", "error", "timeout", "no_outcome")
# causes of extra deliveries (analysis/ledgers/rules.py says what each means)
DUPLICATE_CAUSES = ("consumer_retry", "backup_topic", "producer_resend", "consumer_repull", "transaction_recommit",
                    "timer_reput", "unexplained")
# a half message's class (analysis/contracts/transactions.py), and the totals beside them
TXN_CLASSES = ("committed_delivered", "committed_lost", "committed_undelivered_at_stop", "rolled_back_delivered",
               "rolled_back", "unknown_in_time", "unknown_late", "unknown_never", "undecided", "discarded")
TXN_TOTALS = ("checked_after_end", "abandoned")
# a POP delivery's class and its causes (analysis/contracts/pop.py), and the totals beside them
POP_CLASSES = ("redelivered_after_invisible", "redelivered_after_ack", "consumed_but_lost", "ack_in_doubt", "due_after_stop")
POP_CAUSES = {"redelivered_after_invisible": ("not_acked", "ack_refused", "ack_late", "no_ack"),
              "redelivered_after_ack": ("re_popped", "after_broker_crash", "after_change", "plain_ack"),
              "consumed_but_lost": ("not_acked", "ack_refused", "ack_late", "no_ack"),
              "ack_in_doubt": ("ack_refused",),
              "due_after_stop": ("not_acked", "ack_refused", "ack_late", "no_ack")}
POP_TOTALS = ("deliveries", "keys", "acks_ok", "acks_refused", "changes_ok")
POP_BY_FAULT = "by_fault."  # pop.by_fault.<fault id>: a fault of the scenario
FAMILY_NAMES: dict[str, tuple[str, ...]] = {
    "status": SEND_STATUSES,
    "outcome": OUTCOMES,
    "busy": BUSY_TEXTS,
    "duplicates": DUPLICATE_CAUSES,
    # `unknown`: a key in no store whose acknowledgements carried no status (store_check.strongest)
    "gone_status": (*SEND_STATUSES, "unknown"),
    "transactions": (*TXN_CLASSES, *TXN_TOTALS),
    "pop": (*POP_TOTALS, *POP_CLASSES, *(f"{c}.{x}" for c in POP_CLASSES for x in POP_CAUSES[c])),
    "log": tuple(LOG_MARKS),
}
OPS = ("==", "!=", ">=", "<=", ">", "<")
# a figure family's argument may hold dots itself (pop.redelivered_after_ack.after_change, a fault id)
_CONDITION = re.compile(r"^\s*([a-z_0-9]+(?:\.[A-Za-z0-9_%.-]+)?)\s*(==|!=|>=|<=|>|<)\s*(-?\d+)\s*$")
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")


def parse_condition(text: str) -> tuple[str, str, int]:
    """'lost > 0' -> ('lost', '>', 0); ValueError (the validation line) for anything else."""
    m = _CONDITION.match(text)
    if not m:
        raise ValueError(f"expected '<figure> <op> <integer>' such as 'lost > 0' (op: {' '.join(OPS)}), got {text!r}")
    name, op, value = m.group(1), m.group(2), int(m.group(3))
    if (why := figure_error(name)) is not None:
        raise ValueError(why)
    return name, op, value


def figure_error(name: str) -> str | None:
    """Why `name` is no figure the analysis computes, one line naming the closest one; None when it is
    one, or is a family's whose name the scenario supplies (checks.py checks that against it)."""
    fam, dot, arg = name.partition(".")
    if name in FIGURES or name in DERIVED or (dot and fam in FAMILIES and fam not in FAMILY_NAMES):
        return None
    if dot and fam in FAMILY_NAMES:
        names = FAMILY_NAMES[fam]
        if arg in names or (fam == "pop" and arg.startswith(POP_BY_FAULT)):
            return None
        why = (f"unknown log line {arg!r}; named lines: {', '.join(names)}" if fam == "log" else
               f"unknown figure {name!r}; {fam}.<name>: {', '.join(names)}")
    else:
        why = (f"unknown figure {name!r}; figures: {', '.join([*FIGURES, *DERIVED])}, and per name: "
               + ", ".join(f"{f}.<name>" for f in FAMILIES))
    named = [f"{f}.{n}" for f, ns in FAMILY_NAMES.items() for n in ns]
    # the closest of: the same name in another family (status.timeout -> outcome.timeout), a name of the
    # same family, any figure (a misspelt family keeps its argument: lost_onn.broker-a -> lost_on.broker-a)
    elsewhere = [n for n in named if dot and n.partition(".")[2].lower() == arg.lower()]
    if elsewhere:
        return f"{why}; did you mean {elsewhere[0]}?"
    if dot and fam in FAMILY_NAMES:
        return why + did_you_mean(arg, FAMILY_NAMES[fam], f"{fam}.")
    return why + did_you_mean(name, [*FIGURES, *DERIVED, *named,
                                     *(f"{f}.{arg}" for f in FAMILIES if dot and f not in FAMILY_NAMES)])


def did_you_mean(name: str, known: Iterable[str], prefix: str = "") -> str:
    """'; did you mean <prefix><the closest of known>?' (difflib, case aside; else the one name `name`
    begins, transactions.checked -> checked_after_end), or '' when none is close."""
    by_lower = {k.lower(): k for k in known}
    begun = [k for k in by_lower if k.startswith(name.lower())]
    best = difflib.get_close_matches(name.lower(), by_lower, n=1) or (begun if len(begun) == 1 else [])
    return f"; did you mean {prefix}{by_lower[best[0]]}?" if best else ""


def _condition(v: str) -> str:
    parse_condition(v)
    return v


Condition = Annotated[str, AfterValidator(_condition)]


def _version(v: str) -> str:
    if not _VERSION.match(v):
        raise ValueError(f"expected a RocketMQ version such as 5.3.3, got {v!r}")
    return v


Version = Annotated[str, AfterValidator(_version)]


class TopicOnNode(Strict):
    topic: TopicName
    node: NodeName  # a broker node of this cluster (a slave: broker-a-s; a replica: broker-a-1)


class TopicOnGroup(Strict):
    topic: TopicName
    group: NodeName  # a replicated group of this cluster (brokers[].name with replicas)


class Probe(Strict):
    """One fact read from the live cluster after the drain, before `down` (exactly one key)."""
    topic_absent: TopicOnNode | None = None  # the topic is not in the node's topic config table
    topic_present: TopicOnNode | None = None
    # a replica's consume queues of the topic do not span what its master's do (min/max offsets)
    replica_queues_differ: TopicOnGroup | None = None

    @model_validator(mode="after")
    def _one(self) -> "Probe":
        if sum(x is not None for x in (self.topic_absent, self.topic_present, self.replica_queues_differ)) != 1:
            raise ValueError("a probe is exactly one of: topic_absent, topic_present, replica_queues_differ")
        return self

    def kind(self) -> tuple[str, TopicOnNode | TopicOnGroup]:
        for k in ("topic_absent", "topic_present", "replica_queues_differ"):
            if getattr(self, k) is not None:
                return k, getattr(self, k)
        raise AssertionError("validated: exactly one probe key")

    def words(self) -> str:
        k, t = self.kind()
        if isinstance(t, TopicOnGroup):
            return f"a replica of {t.group} whose consume queues of {t.topic} differ from its master's"
        return f"topic {t.topic} {'absent from' if k == 'topic_absent' else 'present on'} {t.node}"


class FailoverCheck(Strict):
    """The failover after one fault on a replicated group's node (summary.failover.failovers): whether
    a node other than the one hit was master within `elected_within` of the fault."""
    fault: Annotated[str, Field(min_length=1)]  # a fault's `id` in this scenario
    elected_within: Duration
    reproduced_when: Literal["not_elected", "elected"] = "not_elected"
    # [from, to]: the group's first acknowledged send after the fault came this long after it (on any
    # node): writes waited for the master's restart, or for the new master, as long as the scenario says
    first_ack_between: Annotated[list[Duration], Field(min_length=2, max_length=2)] | None = None

    @model_validator(mode="after")
    def _ordered(self) -> "FailoverCheck":
        if self.first_ack_between and self.first_ack_between[0] > self.first_ack_between[1]:
            raise ValueError("first_ack_between: [from, to] with from <= to")
        return self

    def words(self) -> str:
        out = (f"{'no' if self.reproduced_when == 'not_elected' else 'a'} new master within "
               f"{self.elected_within:g} s of fault {self.fault}")
        if self.first_ack_between:
            lo, hi = self.first_ack_between
            out += f", and the group's first ack {lo:g}-{hi:g} s after it"
        return out


class Signature(Strict):
    """What a scenario exists to show, as conditions on its own figures (the form `expect:` uses):
    `shows` in words, then conditions, probes and failover checks that must all hold. The verdict's
    first clause says reproduced, or NOT reproduced naming the condition that failed with its figure
    (analysis/judge/signature.py); a fault or load that fell short of what it was asked counts as a miss too."""
    shows: Annotated[str, Field(min_length=3, max_length=160)]
    conditions: list[Condition] = []
    failovers: list[FailoverCheck] = []

    @model_validator(mode="after")
    def _something(self) -> "Signature":
        if not self.conditions and not self.failovers:
            raise ValueError("signature needs at least one of conditions, failovers (else nothing says "
                             "'reproduced')")
        return self


class Expect(Strict):
    """What "reproduced" means for this scenario: every condition and every probe holds."""
    # the upstream report, or `unfiled:<name>` for an anomaly found here and not yet filed (rmqchaos shrink)
    issue: Annotated[str, Field(pattern=r"^(https://\S+|unfiled:\S+)$")]
    shows_on: Annotated[list[Version], Field(min_length=1)]  # versions the bug was reported on
    gone_in: list[Version] = []  # versions that carry the fix
    # versions upstream says nothing about (a fix unconfirmed): a run there measures, never fails
    measure_on: list[Version] = []
    conditions: list[Condition] = []  # on the summary's figures, e.g. "lost > 0"
    # the bug's setup, which must hold on every version (a fixed one too): without it "not reproduced"
    # says nothing about the fix, and the run reads NOT verified (e.g. "outcome.timeout > 0")
    premise: list[Condition] = []
    probes: list[Probe] = []
    failovers: list[FailoverCheck] = []  # on a fault's failover, e.g. no new master within 60 s

    @model_validator(mode="after")
    def _something(self) -> "Expect":
        if not self.conditions and not self.probes and not self.failovers:
            raise ValueError("expect needs at least one of conditions, probes, failovers (else nothing says "
                             "'reproduced')")
        return self

    def probe_nodes(self) -> list[tuple[int, str]]:
        return [(i, t.node) for i, p in enumerate(self.probes) if isinstance(t := p.kind()[1], TopicOnNode)]

    def probe_groups(self) -> list[tuple[int, str]]:
        return [(i, t.group) for i, p in enumerate(self.probes) if isinstance(t := p.kind()[1], TopicOnGroup)]


def figure(summary: dict[str, Any], name: str) -> int | None:
    """A named figure of FIGURES in a summary; None when the summary has no value for it (no store
    check, or a derived or family figure: analysis/judge/signature.py computes those)."""
    if name not in FIGURES:
        return None
    vals = []
    for path in FIGURES[name].split(" - "):
        v: Any = summary
        for part in path.split("."):
            v = v.get(part) if isinstance(v, dict) else None
        if not isinstance(v, int) or isinstance(v, bool):
            return None
        vals.append(v)
    return vals[0] - sum(vals[1:])
