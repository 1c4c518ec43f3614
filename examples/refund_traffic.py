"""The refund app's load for `wakeful bench`, `wakeful chaos` and the crash suite: a refund under the
approval limit, or (the second path, 40% under chaos) one above it followed by alice's approval.
Its effects are the reference bank's ledger entries, one per op key."""

from __future__ import annotations

import random

import redis

from wakeful.bench.traffic import Effect, Plan, Send, stream_after, stream_mark
from wakeful.examples import bank
from wakeful.examples.bank import LedgerEntry
from wakeful.operate.dev_signers import REQUESTER
from wakeful.schemas import events

LIMIT = 1000  # the local stack's approval limit (Client.reset_authority)


class RefundTraffic:
    share = 0.4
    second_path = "through an approval"

    def plan(self, task_id: str, rng: random.Random, second: bool) -> Plan:
        amount = rng.randint(LIMIT + 1, 5 * LIMIT) if second else rng.randint(1, LIMIT)
        sends = [Send(REQUESTER, events.CREATE, {"amount": amount, "currency": "EUR"})]
        if second:
            sends.append(Send("alice", events.APPROVE, {"version": 1}))
        return Plan(sends, settles="closed", effects=1)

    def mark(self, admin: redis.Redis) -> str:
        return stream_mark(admin, bank.LEDGER)

    def effects(self, admin: redis.Redis, after: str) -> tuple[list[Effect], str]:
        raw, cursor = stream_after(admin, bank.LEDGER, after)
        booked = (LedgerEntry.decode(r) for r in raw)
        return [Effect(e.task_id, e.op_key, e.booked_at) for e in booked], cursor


traffic = RefundTraffic()
