"""An app's load, for `wakeful bench`, `wakeful chaos` and the crash suite: what upstream systems
send for one task, and what the app's downstream did, counted there rather than in wakeful's own
action log.

An app names its traffic with `App(..., traffic="module:attribute")`; the attribute is an object
that satisfies `Traffic`. Every task takes one of two paths: the first (the common case) or the
second (the app's other one: for the bundled example, an amount above the limit and an approval).
"""

from __future__ import annotations

import functools
import importlib
import random
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

import redis

from wakeful.consumers.kafka import client as kafka_client
from wakeful.core.errors import ConfigError
from wakeful.producers.signing import Ed25519Signer, sign_event
from wakeful.schemas import events
from wakeful.sdk.app import App

if TYPE_CHECKING:
    from wakeful.operate.client import Client


@dataclass(frozen=True)
class Send:
    """One signed event an upstream system sends for the task: who signs it, its kind, its body."""

    principal: str
    kind: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class Plan:
    """One task's traffic, and where the task ends once all of it is applied."""

    sends: Sequence[Send]  # in order, each for the task id the plan was made for
    settles: str  # the stage the task settles in
    effects: int  # how many effects its downstream records by then, one per op key
    # Done at the downstream before anything is sent (a fault injected through its test hook).
    arrange: Callable[[redis.Redis], None] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Effect:
    """One thing a downstream did, under the op key it was asked with."""

    task_id: str
    op_key: str
    at: datetime  # the downstream's clock


@runtime_checkable
class Traffic(Protocol):
    """An app's load generator (see the module docstring)."""

    share: float  # chaos's share of tasks on the second path
    second_path: str  # what that path is, for reports: "through an approval"

    def plan(self, task_id: str, rng: random.Random, second: bool) -> Plan:
        """The traffic for one new task, its choices (amounts, names) drawn from `rng`."""
        ...

    def mark(self, admin: redis.Redis) -> str:
        """A cursor for `effects`: everything the downstream records from now on lies after it."""
        ...

    def effects(self, admin: redis.Redis, after: str) -> tuple[list[Effect], str]:
        """Every effect the downstream recorded after the cursor `after`, in order, and the cursor
        to read on from. An undo is an effect of its own, under `UNDO:<op key>`."""
        ...


def load_traffic(app: App) -> Traffic:
    """The traffic `app` names, or a one-line ConfigError that says what to add."""
    if not app.traffic:
        raise ConfigError(
            "App.traffic",
            f'app {app.name!r} has no traffic generator: add App(..., traffic="module:attribute") '
            "naming an object that satisfies wakeful.bench.traffic.Traffic "
            "(the bundled example apps' traffic modules in wakeful.examples show one)",
        )
    module_name, sep, attribute = app.traffic.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigError("App.traffic", f"{app.traffic!r} is not module:attribute")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError("App.traffic", f"cannot import {module_name!r}: {exc}") from exc
    traffic = getattr(module, attribute, None)
    if not isinstance(traffic, Traffic):
        raise ConfigError(
            "App.traffic",
            f"{app.traffic!r} is {type(traffic).__name__}, not a wakeful.bench.traffic.Traffic",
        )
    return traffic


def split(total: int, share: float) -> list[bool]:
    """`total` path choices with `share` of them True, spread evenly (for figures that compare)."""
    return [int((i + 1) * share) > int(i * share) for i in range(total)]


# XRANGE reply: (stream id, fields) in id order. redis-py types the reply for every client flavour.
_Page = list[tuple[bytes, dict[bytes, bytes]]]
PAGE = 500


def stream_mark(admin: redis.Redis, stream: str) -> str:
    """The id of the last entry of `stream` now ("0-0" if it is empty)."""
    last = cast(_Page, admin.xrevrange(stream, count=1))
    return last[0][0].decode() if last else "0-0"


def stream_after(admin: redis.Redis, stream: str, after: str) -> tuple[list[bytes], str]:
    """The value of each entry's one field, for every entry after id `after`, and the last id read."""
    out: list[bytes] = []
    while True:
        page = cast(_Page, admin.xrange(stream, f"({after}", "+", count=PAGE))
        out += [next(iter(fields.values())) for _, fields in page]
        if page:
            after = page[-1][0].decode()
        if len(page) < PAGE:
            return out, after


def signed(plan: Plan, task_id: str, signer: Callable[[str], Ed25519Signer]) -> list[events.SignedEvent]:
    """The plan's events for `task_id`, each signed with `signer(principal)`'s key."""
    return [sign_event(signer(s.principal), s.kind, s.payload, task_id=task_id) for s in plan.sends]


def per_op_key(found: Sequence[Effect], task_ids: Collection[str]) -> dict[str, Counter[str]]:
    """task id -> op key -> how many effects the downstream recorded under it, for `task_ids`."""
    counts: dict[str, Counter[str]] = {t: Counter() for t in task_ids}
    for effect in found:
        if effect.task_id in counts:
            counts[effect.task_id][effect.op_key] += 1
    return counts


@dataclass(frozen=True)
class Planned:
    """A task's traffic, ready to publish."""

    task_id: str
    second: bool  # on the traffic's second path
    plan: Plan
    sent: list[events.SignedEvent]


def plan_tasks(
    client: Client,
    traffic: Traffic,
    paths: Sequence[bool],
    rng: random.Random,
    prefix: str,
    *,
    spread: int | None = None,
) -> list[Planned]:
    """One new task per entry of `paths` (True: the second path), each with a fresh id, its events
    signed and its downstream arranged; nothing is published. With `spread` (a topic's partition
    count) the k-th task's id lands on partition k mod spread of every task-keyed topic, so each
    process of a role with several has a share of the tasks, whichever partitions it holds."""
    signer = functools.cache(client.signer)
    planned: list[Planned] = []
    for k, second in enumerate(paths):
        task_id = new_task_id(prefix, None if spread is None else (k % spread, spread))
        plan = traffic.plan(task_id, rng, second)
        if plan.arrange is not None:
            plan.arrange(client.admin)
        planned.append(Planned(task_id, second, plan, signed(plan, task_id, signer)))
    return planned


def new_task_id(prefix: str, partition: tuple[int, int] | None = None) -> str:
    """A fresh id (new every run, even with the same seed); with (p, n), one the producers' murmur2
    partitioner puts on partition p of n."""
    while True:
        task_id = f"{prefix}-{uuid.uuid4().hex[:12]}"
        if partition is None or kafka_client.partition_of(task_id, partition[1]) == partition[0]:
            return task_id


def warm_up(client: Client, traffic: Traffic) -> None:
    """One task of the first path all the way through, so every role has joined its groups; its
    downstream is arranged as any task's is (an order to look up, say)."""
    task_id = f"w-{uuid.uuid4().hex[:12]}"
    plan = traffic.plan(task_id, random.Random(0), second=False)
    if plan.arrange is not None:
        plan.arrange(client.admin)
    client.publisher.publish_many(signed(plan, task_id, functools.cache(client.signer)), timeout=60)
    client.wait_settled(task_id, 120)
