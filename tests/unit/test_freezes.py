"""The kill path as pure code: which freeze holds a task (its own, its tenant's, its app's, the
fleet's, most specific first); a damaged switch still holds; the gate holds a frozen task's wake
instead of judging it (but a closed task still refuses); a held wake's record replays byte for
byte; a held receipt is no decision; and a freeze is taken in when every live role has read it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from refund_rules import APP, refund

from wakeful.authority import freezes
from wakeful.authority.freezes import Freeze
from wakeful.authority.snapshot import Snapshot
from wakeful.consumers.gate import hold as gate_hold
from wakeful.consumers.gate import rules as gate_rules
from wakeful.consumers.gate.wake import decided
from wakeful.consumers.kafka.switch_acks import LIVE_S, waiting_for
from wakeful.core import topics
from wakeful.core.errors import ConfigError
from wakeful.core.retry import Retry
from wakeful.examples.refund import Stage
from wakeful.schemas import receipt
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.state import keys
from wakeful.state.store import Keep

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def froze(*scopes: str) -> dict[str, Freeze]:
    return {s: Freeze(s, "ops", f"why {s}", "t") for s in scopes}


@pytest.mark.parametrize(
    ("scopes", "expected"),
    [
        ((), None),
        (("all",), "all"),
        (("app:refund",), "app:refund"),
        (("app:other",), None),
        (("tenant:acme",), "tenant:acme"),
        (("tenant:default",), None),
        (("task:acme.t-1",), "task:acme.t-1"),
        (("task:t-1",), None),
        (("all", "app:refund", "tenant:acme", "task:acme.t-1"), "task:acme.t-1"),
        (("all", "app:refund", "tenant:acme"), "tenant:acme"),
        (("all", "app:refund"), "app:refund"),
    ],
)
def test_the_freeze_a_task_meets_is_the_most_specific_that_names_it(
    scopes: tuple[str, ...], expected: str | None
) -> None:
    found = freezes.holding(froze(*scopes), "refund", "acme", "acme.t-1")
    assert (found.scope if found else None) == expected


@pytest.mark.parametrize(
    ("kind", "name", "said"),
    [
        ("app", "a b", "is not a app name"),
        ("tenant", "x" * 65, "is not a tenant name"),
        ("task", "t:1", "is not a task name"),
        ("everything", "", "is not one of all"),
    ],
)
def test_a_scope_is_checked_before_anything_is_written(kind: str, name: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        freezes.scope(kind, name)


@pytest.mark.parametrize(("by", "reason", "said"), [("", "x", "--by"), ("ops", " ", "--reason")])
def test_a_switch_says_who_and_why(by: str, reason: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        freezes.record(by, reason, "t")


@pytest.mark.parametrize("raw", [b"not json", b"[1]", b"null", b'"x"'])
def test_a_damaged_switch_record_still_freezes_its_scope(raw: bytes) -> None:
    found = freezes.frozen_from({b"all": raw, b"app:refund": freezes.record("ops", "incident 7", "t")})
    assert set(found) == {"all", "app:refund"}
    assert "unreadable" in found["all"].reason
    assert (found["app:refund"].by, found["app:refund"].reason) == ("ops", "incident 7")


def task(stage: Stage | None = None) -> Checkpoint:
    cp = refund.create(
        "t-1", "svc", "default", {"amount": 2500}, auth=Snapshot(approvers=frozenset(), limit=1000), now=NOW
    )
    assert isinstance(cp, Checkpoint)
    return refund._with(cp, stage=stage) if stage else cp


def test_the_gate_holds_a_frozen_tasks_deadline_and_events_instead_of_judging_them() -> None:
    auth = Snapshot(approvers=frozenset(), limit=1000, frozen=froze("all"))
    ruled = gate_rules.decide(APP, task(), None, "", tenant="default", auth=auth, now=NOW)
    assert isinstance(ruled, gate_rules.Frozen) and ruled.freeze.scope == "all"
    assert isinstance(gate_rules.written(ruled), Keep)  # writes nothing to the task


def test_a_closed_task_refuses_even_when_frozen() -> None:
    auth = Snapshot(approvers=frozenset(), limit=1000, frozen=froze("all"))
    ruled = gate_rules.decide(APP, task(Stage.CLOSED), None, "", tenant="default", auth=auth, now=NOW)
    assert not isinstance(ruled, gate_rules.Frozen)


@given(
    st.binary(max_size=64),
    st.binary(max_size=512),
    st.lists(st.tuples(st.text(max_size=12), st.binary(max_size=64)), max_size=4),
)
def test_a_held_wake_replays_byte_for_byte(
    key: bytes, value: bytes, headers: list[tuple[str, bytes]]
) -> None:
    assert gate_hold.parts_from(gate_hold.record((key, value, headers))) == (key, value, headers)


@pytest.mark.parametrize(
    "raw", [b"", b"{", b'{"key": "!!", "value": "", "headers": []}', b'{"key": ""}', b"[]"]
)
def test_a_held_record_that_is_not_one_is_named_never_replayed(raw: bytes) -> None:
    said = gate_hold.parts_from(raw)
    assert isinstance(said, str) and said.startswith("unreadable held wake")


@pytest.mark.parametrize(
    ("status", "decided_before"),
    [("held", False), ("accepted", True), ("rejected", True), ("duplicate", True)],
)
def test_a_held_receipt_is_no_decision(status: str, decided_before: bool) -> None:
    assert decided(receipt.encode(status, "why", "t-1", "gate")) is decided_before
    assert decided(None) is False


def live(**entries: Any) -> dict[str, str]:
    return {name: f"{seen} {at}" for name, (seen, at) in entries.items()}


def test_a_freeze_is_taken_in_when_every_live_role_has_read_its_counter() -> None:
    now = 1_000_000
    stale = now - int(LIVE_S * 1000) - 1
    rows = live(gate=(7, now), executor=(6, now - 100), old=(1, stale)) | {"junk": "x"}
    assert waiting_for(rows, 7, now) == (["gate"], ["executor"])
    assert waiting_for(rows, 6, now) == (["executor", "gate"], [])


def test_a_held_deadline_wake_is_not_kept_only_its_task_marked() -> None:
    assert gate_hold.hold_writes("t-1", None) == [("SADD", keys.HELD_TASKS, "t-1")]
    assert gate_hold.hold_writes("t-1", b"w")[0] == ("RPUSH", keys.held("t-1"), b"w")


class HeldList:
    """A task's held list and the marked set, in memory (the drain's whole use of Redis)."""

    def __init__(self, *records: bytes) -> None:
        self.items, self.marked = list(records), {"t-1"}

    def lindex(self, _name: str, index: int) -> bytes | None:
        return self.items[index] if self.items else None

    def lrem(self, _name: str, _count: int, raw: bytes) -> None:
        self.items.remove(raw)

    def srem(self, _name: str, task_id: str) -> None:
        self.marked.discard(task_id)


def no_letter(parts: gate_hold.Parts, why: str) -> None:
    raise AssertionError(f"dead-lettered {parts!r}: {why}")


def held(value: bytes) -> bytes:
    return gate_hold.record((b"k", value, []))


def test_the_drain_replays_oldest_first_and_stops_where_a_freeze_still_holds() -> None:
    seen: list[bytes] = []

    def replay(parts: gate_hold.Parts) -> str:
        seen.append(parts[1])
        return gate_hold.KEPT if parts[1] == b"3" else gate_hold.REPLAYED

    store = HeldList(held(b"1"), held(b"2"), held(b"3"), held(b"4"))
    assert gate_hold.drain(store, "t-1", replay, no_letter, lambda *_, **__: None) is False
    assert seen == [b"1", b"2", b"3"] and [gate_hold.parts_from(r)[1] for r in store.items] == [b"3", b"4"]
    assert store.marked == {"t-1"}


def test_a_held_record_that_cannot_be_judged_is_dead_lettered_whole_not_left_in_front() -> None:
    def replay(parts: gate_hold.Parts) -> str:
        if parts[1] == b"bad":
            raise ValueError("the app's code failed")
        return gate_hold.REPLAYED

    letters: list[tuple[gate_hold.Parts, str]] = []
    store = HeldList(b"not a record", held(b"bad"), held(b"ok"))
    assert gate_hold.drain(
        store, "t-1", replay, lambda *letter: letters.append(letter), lambda *_, **__: None
    )
    assert store.items == [] and store.marked == set()
    assert [parts[1] for parts, _ in letters] == [b"not a record", b"bad"]  # the bytes kept whole
    assert "unreadable held wake" in letters[0][1] and "the app's code failed" in letters[1][1]
    message = gate_hold.letter(letters[1][0])
    assert (message.topic(), message.key(), message.value()) == (topics.WAKE, b"k", b"bad")


@pytest.mark.parametrize(
    ("held", "full"), [(0, False), (gate_hold.HELD_MAX - 1, False), (gate_hold.HELD_MAX, True)]
)
def test_a_frozen_task_keeps_at_most_held_max_wakes(held: int, full: bool) -> None:
    said = gate_hold.full("t-1", held)
    assert (said is not None) is full
    assert said is None or ("t-1" in said and "replay this letter" in said)


def test_a_transient_failure_is_raised_and_the_record_kept() -> None:
    def replay(_parts: gate_hold.Parts) -> str:
        raise Retry("task lease is held by another worker")

    store = HeldList(held(b"1"))
    with pytest.raises(Retry):
        gate_hold.drain(store, "t-1", replay, no_letter, lambda *_, **__: None)
    assert len(store.items) == 1


def test_a_wake_held_from_kafka_pins_its_partitions_floor_at_its_offset_and_a_deadline_pins_none() -> None:
    """D115: the hold keeps the floor a change of that partition carries at or below the wake."""
    kept = gate_hold.hold_writes("t-1", b"wake", (3, 42))
    assert ("ZADD", keys.held_floor(3), "NX", 42, "t-1") in kept  # NX: the task's oldest held wake
    assert not any(c[0] == "ZADD" for c in gate_hold.hold_writes("t-1", None, (3, 42)))  # a deadline's
    assert not any(c[0] == "ZADD" for c in gate_hold.hold_writes("t-1", b"wake"))  # replayed: pinned already


class _Unanswered:
    def pipeline(self, transaction: bool = False) -> _Unanswered:
        return self

    def zrange(self, *args: object, **kwargs: object) -> None:
        return None

    def execute(self) -> list[object]:
        raise ConnectionError("Redis did not answer")


def test_floors_unread_are_pinned_at_zero_never_left_free() -> None:
    """A floor too low only adds work to a recovery; one too high would lose the held wakes."""
    assert gate_hold.pins(_Unanswered(), [2, 0, 2]) == {0: 0, 2: 0}
