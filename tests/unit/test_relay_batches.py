"""The relay's packing of outbox records into wakeful.log messages (D47), and the reader that
unpacks them: every good record rides exactly once, in its task's partition and write order;
a record that cannot ride is handed back for the dead-letter topic, never dropped."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wakeful.consumers.relay.batches import MESSAGE_BYTES, pack
from wakeful.core.errors import DecodeError
from wakeful.schemas.logs import LOG_BATCH_HEAD, OutboxRecord, log_records
from wakeful.state.outbox import Pending

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def record(task_id: str, version: int, detail: str = "") -> bytes:
    return OutboxRecord(
        record_id=f"{task_id}:{version}",
        task_id=task_id,
        state_version=version,
        message_id=f"m-{version}",
        stage="ready",
        task_version=1,
        at=T0,
        detail={"note": detail} if detail else {},
    ).encode()


def pending(task_id: str, records: list[bytes]) -> Pending:
    ids = [f"{task_id}:{i}" for i in range(len(records))]
    return Pending(task_id, [f"{i}-0".encode() for i in range(len(records))], ids, records, records)


def by_hash(partitions: int):  # type: ignore[no-untyped-def]
    return lambda task_id: sum(task_id.encode()) % partitions


def unpacked(messages: list) -> list[tuple[int, str]]:  # type: ignore[type-arg]
    """(partition, record id) of everything the messages carry, in send order."""
    out: list[tuple[int, str]] = []
    for m in messages:
        records, problems = log_records(m.value())
        assert problems == []
        out += [(m.partition, r.record_id) for r in records]
    return out


@settings(max_examples=100)
@given(
    tasks=st.dictionaries(
        st.from_regex(r"t-[a-z0-9]{1,6}", fullmatch=True), st.integers(1, 6), min_size=1, max_size=30
    ),
    partitions=st.integers(1, 8),
    limit=st.sampled_from([400, 1200, MESSAGE_BYTES]),
)
def test_every_record_rides_once_in_its_tasks_partition_and_write_order(
    tasks: dict[str, int], partitions: int, limit: int
) -> None:
    batch = [pending(t, [record(t, v) for v in range(1, n + 1)]) for t, n in tasks.items()]
    messages, refused = pack(batch, by_hash(partitions), limit)
    assert refused == []
    seen = unpacked(messages)
    assert sorted(r for _, r in seen) == sorted(f"{t}:{v}" for t, n in tasks.items() for v in range(1, n + 1))
    for t, n in tasks.items():
        mine = [(p, r) for p, r in seen if r.startswith(f"{t}:")]
        assert {p for p, _ in mine} == {by_hash(partitions)(t)}
        assert [r for _, r in mine] == [f"{t}:{v}" for v in range(1, n + 1)]
    for m in messages:
        assert len(m.value()) <= limit
        assert m.task_ids == {r.split(":")[0] for r in (x.record_id for x in log_records(m.value())[0])}


def test_a_claim_costs_one_message_per_partition_not_one_per_record() -> None:
    batch = [pending(f"t-{i}", [record(f"t-{i}", v) for v in range(1, 4)]) for i in range(40)]
    messages, _ = pack(batch, by_hash(6), MESSAGE_BYTES)
    assert len(messages) == len({by_hash(6)(f"t-{i}") for i in range(40)}) <= 6


def test_a_record_that_cannot_ride_is_handed_back_with_its_reason_and_its_neighbours_still_ride() -> None:
    good = record("t-1", 1)
    huge = record("t-1", 2, "x" * 2000)
    batch = [pending("t-1", [good, b"not json {", b"[1, 2]", huge, record("t-1", 5)])]
    messages, refused = pack(batch, by_hash(3), limit=1000)
    assert [r for _, r in unpacked(messages)] == ["t-1:1", "t-1:5"]
    reasons = [m.reason for m in refused]
    assert [m.entry_id for m in refused] == [b"1-0", b"2-0", b"3-0"]
    assert "not JSON" in reasons[0]
    assert "not a JSON object" in reasons[1]
    assert "over the 1000-byte message limit" in reasons[2]
    assert all(m.fields[b"r"] for m in refused), "a refused record is kept whole for its dead letter"


def test_the_reader_still_reads_a_message_written_before_batching() -> None:
    records, problems = log_records(record("t-1", 7))
    assert [r.record_id for r in records] == ["t-1:7"] and problems == []


def test_the_reader_reads_around_a_bad_record_and_refuses_an_unreadable_message() -> None:
    value = LOG_BATCH_HEAD + record("t-1", 1) + b',{"planted":true},' + record("t-1", 2) + b"]}"
    records, problems = log_records(value)
    assert [r.record_id for r in records] == ["t-1:1", "t-1:2"]
    assert len(problems) == 1 and problems[0].startswith("record 1:")
    for bad in (b"\xff", b"[]", orjson.dumps({"schema_version": 9, "kind": "outbox_batch", "records": []})):
        with pytest.raises(DecodeError):
            log_records(bad)
