"""`wakeful recover`'s re-drive (D87): move the gate's and the executor's groups back to where the
log says nothing after is certain (state/redrive.py), so that the workers, when they start again,
apply once more whatever a lost Redis held and the log does not. The inbox marks the recover
rebuilt from the log dedupe what the log already reflects; op keys and the tool's lookup keep an
effect from running twice (crash cases B and C).

Why move the offsets rather than publish the messages again: the roles then read the very
messages they read before, with their producers' signatures and the broker's append times, so the
gate judges an old wake exactly as it did when it first read it (D84); nothing new lands on the
topics for a later re-drive to read again; and the broker refuses to move the offsets of a group
that has a member, so a worker still running makes the re-drive fail instead of racing it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
    AdminClient,
    OffsetSpec,
)

from wakeful.consumers.consuming import CLASSIC_SESSION_S
from wakeful.consumers.redrive_retention import REDRIVEN
from wakeful.core import kafka_auth, kafka_rights, topics
from wakeful.core.errors import WakefulError
from wakeful.core.log import librdkafka_config
from wakeful.core.settings import Settings
from wakeful.state.redrive import Coverage, Start, start

Say = Callable[[str], None]
TIMEOUT_S = 30.0
EMPTY_WAIT_S = CLASSIC_SESSION_S + 15  # a static member that died keeps its place for its session
# The groups moved back. The executor's is not: a proposal the log does not reflect is either ahead
# of its restored task (the gate, re-driven, asks again) or answers its outstanding request, and is
# published again then (redrive_proposals.py); moving the group would dead-letter the others.
MOVED = {topics.WAKE: REDRIVEN[topics.WAKE]}


@dataclass
class Plan:
    """Where each partition of the re-driven topics starts, and what the log said."""

    starts: list[Start] = field(default_factory=list)
    watermarks: int = 0
    sourced: int = 0  # changes on the log that named their input

    @property
    def gone(self) -> list[Start]:
        return [s for s in self.starts if s.gone]

    def as_dict(self) -> dict[str, object]:
        return {
            "watermarks": self.watermarks,
            "changes_with_source": self.sourced,
            "starts": {f"{s.topic}[{s.partition}]": s.why() for s in self.starts},
            "deleted_by_retention": [s.why() for s in self.gone],
        }


def _admin(settings: Settings) -> AdminClient:
    return AdminClient(kafka_auth.client_config(settings, kafka_rights.ADMIN) | librdkafka_config())


def plan(settings: Settings, coverage: Coverage) -> Plan:
    """Each partition's start, from the log's coverage and the topics' and groups' offsets now."""
    admin = _admin(settings)
    floors = coverage.floors()
    found = Plan(watermarks=coverage.watermarks, sourced=coverage.changes)
    for topic, group in REDRIVEN.items():
        meta = admin.list_topics(topic, timeout=TIMEOUT_S).topics.get(topic)
        if meta is None or meta.error is not None:
            raise WakefulError(f"cannot read {topic}: {meta.error if meta else 'no such topic'}")
        parts = [TopicPartition(topic, p) for p in sorted(meta.partitions)]
        low = _offsets(admin, parts, OffsetSpec.earliest())  # type: ignore[no-untyped-call]  # untyped in the library
        high = _offsets(admin, parts, OffsetSpec.latest())  # type: ignore[no-untyped-call]  # untyped in the library
        committed = _committed(admin, group, parts)
        found.starts += [
            start(
                (topic, tp.partition),
                floors.get((topic, tp.partition)),
                low[tp.partition],
                high[tp.partition],
                committed.get(tp.partition),
            )
            for tp in parts
        ]
    return found


def _offsets(admin: AdminClient, parts: list[TopicPartition], spec: OffsetSpec) -> dict[int, int]:
    futures = admin.list_offsets({tp: spec for tp in parts}, request_timeout=TIMEOUT_S)
    return {tp.partition: int(f.result(TIMEOUT_S).offset) for tp, f in futures.items()}


def _committed(admin: AdminClient, group: str, parts: list[TopicPartition]) -> dict[int, int]:
    request = [ConsumerGroupTopicPartitions(group, parts)]
    result = next(iter(admin.list_consumer_group_offsets(request, request_timeout=TIMEOUT_S).values()))
    return {tp.partition: tp.offset for tp in result.result(TIMEOUT_S).topic_partitions if tp.offset >= 0}


def apply(settings: Settings, found: Plan, say: Say, wait_s: float = EMPTY_WAIT_S) -> list[str]:
    """Move each group back to its partitions' starts; returns what moved. Waits up to `wait_s`
    for a group to have no member (a worker that died keeps its place for its session), then
    refuses: the broker moves no offsets under a running member, nor must recover."""
    admin = _admin(settings)
    moved: list[str] = []
    for topic, group in MOVED.items():
        back = [
            TopicPartition(topic, s.partition, s.offset) for s in found.starts if s.topic == topic and s.moved
        ]
        if not back:
            continue
        _wait_empty(admin, group, say, wait_s)
        request = [ConsumerGroupTopicPartitions(group, back)]
        future = next(iter(admin.alter_consumer_group_offsets(request, request_timeout=TIMEOUT_S).values()))
        try:
            future.result(TIMEOUT_S)
        except KafkaException as exc:
            raise WakefulError(
                f"could not move {group} back on {topic} ({exc}): stop every gate and executor, "
                "then run `wakeful recover` again (it restores nothing twice)"
            ) from exc
        moved += [f"{group} {topic}[{tp.partition}] -> {tp.offset}" for tp in back]
    for line in moved:
        say(f"recover: re-drive {line}")
    return moved


def _wait_empty(admin: AdminClient, group: str, say: Say, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        future = next(iter(admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S).values()))
        described = future.result(TIMEOUT_S)
        if described.state in (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD) or not described.members:
            return
        if time.monotonic() > deadline:
            raise WakefulError(
                f"{group} still has {len(described.members)} member(s) after {wait_s:.0f} s: stop "
                "every gate and executor, then run `wakeful recover` again (it restores nothing twice)"
            )
        if not said:
            say(f"recover: waiting for {group} to have no member (a stopped worker's session ends) ...")
            said = True
        time.sleep(1.0)
