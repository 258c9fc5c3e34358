"""The Locust user: one simulated producer sending business messages on a fixed schedule.

Pacing is Locust's `wait_time` hook with an anchored schedule: user i sends its n-th message at
start + n / (rate / users). Unlike `constant_throughput`, a stall does not move the schedule, so the
intended send time recorded in the ledger is free of coordinated omission: after a broker stall,
the late messages go out back to back, each carrying the time it should have gone.
"""
from __future__ import annotations

import time

from locust import User, task
from locust.exception import StopUser

from loadgen.context import LoadContext


class ProducerUser(User):
    def on_start(self) -> None:
        self.ctx: LoadContext = self.environment.rmq_ctx  # type: ignore[attr-defined]
        load = self.ctx.load
        self.interval = load.users / load.rate
        self.t0 = time.time()
        self.n = 0
        # an ordered load: this user is one message stream, sending its own sharding keys in turn, each
        # key's messages numbered from 1 and one after another (a key has one sender, so its send order
        # is its order); empty otherwise
        self.keys = self.ctx.new_stream()
        self.numbers = [0] * len(self.keys)

    def wait_time(self) -> float:
        return max(0.0, self.t0 + self.n * self.interval - time.time())

    @task
    def send(self) -> None:
        seq = self.ctx.take()
        if seq is None:
            raise StopUser()
        intended = self.t0 + self.n * self.interval
        shard = None
        if self.keys:
            j = self.n % len(self.keys)
            self.numbers[j] += 1
            shard = (self.keys[j], self.numbers[j])
        self.n += 1
        self.ctx.send_message(seq, intended, shard)
