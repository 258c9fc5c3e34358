"""The scenario document: its sections beside `cluster` (checks, load, consumers, faults) and the
`Scenario` model itself. Later stages add sections as new fields of `Scenario`."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictInt, model_validator

from rmqchaos.spec.cluster import Cluster
from rmqchaos.spec.expect import Expect, Signature
from rmqchaos.spec.types import (Duration, FaultTarget, GroupName, NodeName, NonNegDuration, Strict, TopicName,
                                 _duration)

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


class Order(Strict):
    """Per-key order: `keys_per_user` sharding keys per Locust user (the key space is users x that),
    each key's messages numbered from 1 and sent one after another to the queue the key hashes to
    over the route's queues (as the Java client's SelectMessageQueueByHash). `strict`: a key stays on
    the queue it was first sent to; a send fails rather than move while that queue is not in the route."""
    keys_per_user: Annotated[StrictInt, Field(ge=1, le=10_000)] = 4
    strict: StrictBool = False


class Transaction(Strict):
    """A transactional load (issue 50): every message is a half message, then ended as the mix says:
    `commit`, `rollback` or `unknown` (the shares sum to 1). `end_after`: the application's time between
    the half message's answer and its end (a check-back may come first when it exceeds the broker's
    transactionTimeOut, 6 s). An unknown end waits for the broker's check-back, which the application
    answers with `unknown_resolves_to`; a commit or rollback, asked again, gets the same answer; a
    half message it has no decision for (the application died before deciding: the producer_crash
    fault), rollback. `check_after`: the time it takes to answer a check-back."""
    commit: Annotated[float, Field(ge=0, le=1)] = 1.0
    rollback: Annotated[float, Field(ge=0, le=1)] = 0.0
    unknown: Annotated[float, Field(ge=0, le=1)] = 0.0
    end_after: Annotated[float, BeforeValidator(_duration), Field(ge=0, le=600)] = 0.0
    # `unknown`: an application that never learns the outcome; the broker gives up after
    # transactionCheckMax check-backs (the `discarded` class)
    unknown_resolves_to: Literal["commit", "rollback", "unknown"] = "commit"
    # a slow check-back: the application takes this long to answer each (a slow local-transaction lookup)
    check_after: Annotated[float, BeforeValidator(_duration), Field(ge=0, le=600)] = 0.0
    # how long the producers stay after the load for the check-backs of what they ended unknown (an
    # application stays up; the broker asks after transactionTimeOut, then every transactionCheckInterval)
    linger: Annotated[float, BeforeValidator(_duration), Field(ge=0, le=600)] = 45.0
    # the half message's CHECK_IMMUNITY_TIME_IN_SECONDS property, whole seconds (None: not set). The
    # broker checks such a half no sooner than this (or transactionTimeOut, the longer); since 5.1.1
    # (apache/rocketmq#6402) it refuses the application's own end once the half is older than that
    check_immunity: Annotated[StrictInt, Field(ge=1, le=3600)] | None = None

    @model_validator(mode="after")
    def _mix(self) -> "Transaction":
        if abs(self.commit + self.rollback + self.unknown - 1) > 1e-9:
            raise ValueError(f"commit + rollback + unknown must be 1, got {self.commit + self.rollback + self.unknown:g}")
        return self


class Timer(Strict):
    """A timer load (issue 51): every message is a scheduled one, due at a time the producer records in
    its key (rmqchaos/ledger/schema.py DUE_SEP). `delay_level`: a 4.x delay level (the DELAY property; level 1
    is the first delay of the brokers' messageDelayLevel), due its delay after the message was made;
    or `delay` (+ `spread`): the TIMER_DELIVER_MS property, due at the time the message was made plus
    `delay` plus a share of `spread` drawn by the key's hash. `wait`: how long the drain waits past
    the last due time (a timer delivered later is counted lost, its copy looked up in the store)."""
    delay_level: Annotated[StrictInt, Field(ge=1, le=64)] | None = None
    delay: Annotated[float, BeforeValidator(_duration), Field(gt=0, le=7 * 24 * 3600)] | None = None
    spread: Annotated[float, BeforeValidator(_duration), Field(ge=0, le=7 * 24 * 3600)] = 0.0
    wait: Annotated[float, BeforeValidator(_duration), Field(ge=0, le=24 * 3600)] = 60.0

    @model_validator(mode="after")
    def _one(self) -> "Timer":
        if (self.delay_level is None) == (self.delay is None):
            raise ValueError("give one of delay_level (a 4.x delay level) or delay (a timer: TIMER_DELIVER_MS)")
        if self.spread and self.delay is None:
            raise ValueError("spread goes with delay (a delay level's delay is the broker's)")
        return self


class Load(Strict):
    """Locust load: `users` producers at `rate` messages/s in total, for `duration` or `messages`."""
    topic: TopicName = "RMQCHAOS_LOAD"
    # attributes the load's topics are created with (mqadmin updateTopic -a +message.type=NORMAL)
    topic_attributes: dict[Annotated[str, Field(pattern=r"^[a-z][a-z0-9._]{0,60}$")],
                           Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,60}$")]] = {}
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
    # how often the producers ask namesrv for a topic's route (the Java client's pollNameServerInterval:
    # it refreshes on this period, not after a failed send, and at every send only while the route
    # lists no writable queue), so a failover costs what it costs an application: sends go to a dead
    # or demoted master until the next refresh
    route_refresh: Annotated[float, BeforeValidator(_duration), Field(ge=1, le=600)] = 30.0
    policy: Policy = Policy()
    # remoting: the platform's producer under Locust, to the brokers; grpc: the 5.x Java client's Producer
    # through the proxy (io.rmqchaos.GrpcProducer, docs/grpc.md), no_retry or retry policies only
    client: Literal["remoting", "grpc"] = "remoting"
    workers: Annotated[StrictInt, Field(ge=0, le=16)] = 0  # 0: one process; N: Locust master + N workers
    ledger: StrictBool = True  # off only to measure the ledger's cost
    # an ordered load (issue 50): each user is a message stream sending its own sharding keys in turn,
    # each message to the queue its key hashes to (rmqclient selector); None: any queue, round robin
    order: "Order | None" = None
    # a transactional load (issue 50): half messages ended by the mix (rmqclient/transaction.py)
    transaction: Transaction | None = None
    # a timer load (issue 51): every message scheduled by delay level or deliver time
    timer: Timer | None = None

    def backup_topic(self) -> str | None:
        if self.policy.kind != "resend_to_backup_topic":
            return None
        return self.policy.backup_topic or f"{self.topic}_bak"

    def topics(self) -> list[str]:
        return [self.topic] + ([b] if (b := self.backup_topic()) else [])


class Grpc(Strict):
    """A consumer through the proxy with the 5.x Java client (io.rmqchaos.GrpcConsumer, docs/grpc.md): POP."""
    kind: Literal["simple", "push"] = "simple"  # SimpleConsumer (receive/ack) or PushConsumer
    # SimpleConsumer: the invisible time each receive asks for (the proxy refuses under 10 s,
    # minInvisibleTimeMillsForRecv), how long a receive waits for messages (awaitDuration), and a
    # changeInvisibleDuration to this before each ack (issue #9583's shape)
    invisible: Duration = 15.0
    long_polling: Duration = 5.0
    change_invisible: Duration | None = None
    # the last message of each receive acked this much later, the others at once (#8835's shape: the
    # broker put the receive's checkpoint to its store before the last ack); 0: every ack at once
    last_ack_delay: Annotated[float, BeforeValidator(_duration), Field(ge=0, le=600)] = 0.0


class ConsumerInstance(Strict):
    id: NodeName = "c0"
    group: GroupName = "rmqchaos_consumer"
    topics: list[TopicName] | None = None  # default: every topic of the load (incl. the backup topic)
    mode: Literal["all", "ack_first_of_batch"] = "all"
    # orderly: MessageListenerOrderly (each queue consumed by one thread under the broker's queue lock),
    # what an ordered load's consumers use (load.order); with mode `all` only
    listener: Literal["concurrently", "orderly"] = "concurrently"
    batch_size: Annotated[StrictInt, Field(ge=1, le=1024)] = 1
    delay_ms: Annotated[StrictInt, Field(ge=0, le=60_000)] = 0
    threads: Annotated[StrictInt, Field(ge=1, le=256)] = 8
    heap_mb: Annotated[StrictInt, Field(ge=64, le=4096)] = 256
    # redeliveries through %RETRY% before a message goes to %DLQ%<group>; -1: the client's default (16)
    max_reconsume_times: Annotated[StrictInt, Field(ge=-1, le=16)] = -1
    # its JVM under libfaketime: a clock of its own that a consumer_clock fault moves (docs/faults.md)
    faketime: bool = False
    # through the proxy with the 5.x gRPC client (POP); none: the remoting DefaultMQPushConsumer
    grpc: Grpc | None = None


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
    in the route, or a %RETRY% queue its first route did not list, only at its next refresh.

    `revive_wait`: with gRPC SimpleConsumers, how long after its invisible time a popped message not
    acked may take to come back. The drain waits the longest invisible time plus this without a new
    delivery, and the analysis judges a delivery `consumed_but_lost` only when its invisible time plus
    this ended before the consumers stopped. The broker's revive service rests while its revive topic
    is idle: 39 s was seen (docs/grpc.md), hence 60 s. Shorter ends a fault-free run sooner but looks
    for late redeliveries (a revived acked message) for that long only."""
    instances: list[ConsumerInstance] = Field(default_factory=lambda: [ConsumerInstance()])
    settle: Duration = 3.0
    revive_wait: NonNegDuration = 60.0
    drain_timeout: Duration = 300.0
    route_refresh: Annotated[float, BeforeValidator(_duration), Field(ge=1, le=600)] = 30.0


# ---------------------------------------------------------------- faults


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
    # a node, or a role resolved when it fires (master-of:<group>, controller-leader); none for admin-level kinds
    target: FaultTarget | None = None
    at: NonNegDuration
    # another fault's id: `at` then counts from that fault's end, not the load's start (a cleanup
    # that must follow a flood whose length the host decides)
    after: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,40}$")] | None = None
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
    roles: bool  # `target:` may be a role, resolved when the fault fires
    powerfs: bool  # the nodes it may hit need their store on the powerfs layer (cluster.powerfs)

    def span(self, params: Any) -> float: ...

    def check(self, params: Any, fault: "Fault", scenario: "Scenario") -> list[tuple[tuple[Any, ...], str]]: ...


class ExploreOrigin(Strict):
    """Where a generated scenario came from (`rmqchaos explore`): its seed draws its faults from its base."""
    seed: Annotated[StrictInt, Field(ge=0)]
    base: Annotated[str, Field(min_length=1)]  # the base scenario's path


class Scenario(Strict):
    name: NodeName  # default: the file's name without .yaml (never inherited through `extends`)
    description: str = ""
    cluster: Cluster = Field(default_factory=Cluster)
    checks: Checks = Checks()
    load: Load | None = None
    consumers: Consumers | None = None  # default with a load: one consumer `c0` acking everything
    faults: list[Fault] = []
    expect: Expect | None = None  # a known bug's signature: the run's verdict says reproduced or not
    # what the scenario exists to show (every scenario file of the repo states one; a scenario with
    # `expect:` is judged by it instead): the verdict's first clause says reproduced or NOT reproduced
    signature: Signature | None = None
    explore: ExploreOrigin | None = None  # a schedule `rmqchaos explore` drew (chaos/explore.py)

    @model_validator(mode="after")
    def _default_consumers(self) -> "Scenario":
        if self.load is not None and self.consumers is None:
            self.consumers = Consumers()
        return self

    def resolved(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
