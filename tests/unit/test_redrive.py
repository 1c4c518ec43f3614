"""Where `wakeful recover` re-drives each partition from (D87): the floors the log's changes carry,
covered by the relay's watermarks (state/redrive.py), and the watermark the relay may publish
(consumers/relay/watermark.py). Table-driven; no server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from confluent_kafka import Message
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from wakeful.consumers.kafka import retention as redrive_retention
from wakeful.consumers.kafka.retention import Kept
from wakeful.consumers.relay import watermark as relay_watermark
from wakeful.consumers.relay.watermark import Snapshot, Watermarks
from wakeful.core import topics
from wakeful.core.log_signing import LogSigner
from wakeful.core.provenance import RoleKeys, RoleSigner
from wakeful.operate import log_reader
from wakeful.operate.log_reader import Read
from wakeful.schemas.changelog import ChangeMark, Mark, log_items, log_marks
from wakeful.schemas.logs import LOG_BATCH_HEAD, LOG_BATCH_TAIL, OutboxRecord
from wakeful.schemas.redrive import LogWatermark, MessageSource
from wakeful.state.redrive import Coverage, start

W = topics.WAKE
P = topics.PROPOSALS


def mark(*covers: tuple[int, int]) -> LogWatermark:
    return LogWatermark(
        record_id="watermark:r:1", relay="r", watermark_at=datetime.now(UTC), covers=tuple(covers)
    )


def src(topic: str, partition: int, floor: int) -> MessageSource:
    return MessageSource(topic=topic, partition=partition, offset=floor + 3, floor=floor)


# Each case: what the log gives, in read order ("c": a change at (log partition, log offset) with its
# source; "w": a watermark), and the floors expected per source partition.
CASES: list[tuple[str, list[tuple[str, object]], dict[tuple[str, int], int]]] = [
    ("no watermark: no floor is vouched for", [("c", (0, 5, src(W, 0, 40)))], {}),
    (
        "a change below the watermark: its floor",
        [("c", (0, 5, src(W, 0, 40))), ("w", mark((0, 6)))],
        {(W, 0): 40},
    ),
    (
        "a change at the watermark's end is not covered",
        [("c", (0, 5, src(W, 0, 40))), ("c", (0, 6, src(W, 0, 50))), ("w", mark((0, 6)))],
        {(W, 0): 40},
    ),
    (
        "the highest covered floor of a source partition, over log partitions",
        [
            ("c", (0, 5, src(W, 1, 40))),
            ("c", (1, 9, src(W, 1, 70))),
            ("c", (1, 12, src(W, 1, 90))),
            ("w", mark((0, 10), (1, 10))),
        ],
        {(W, 1): 70},
    ),
    (
        "a floor that went back (a rebalance) never lowers the start",
        [("c", (0, 1, src(W, 0, 80))), ("c", (0, 2, src(W, 0, 60))), ("w", mark((0, 3)))],
        {(W, 0): 80},
    ),
    (
        "a watermark read before the changes it covers still covers them",
        [("w", mark((0, 4))), ("c", (0, 2, src(P, 3, 11))), ("c", (0, 7, src(P, 3, 19)))],
        {(P, 3): 11},
    ),
    (
        "the newest watermark counts, an older one does not shrink it",
        [
            ("c", (2, 1, src(W, 0, 5))),
            ("c", (2, 8, src(W, 0, 30))),
            ("w", mark((2, 9))),
            ("w", mark((2, 2))),
        ],
        {(W, 0): 30},
    ),
    (
        "a watermark covers only the log partitions it names",
        [("c", (3, 1, src(W, 2, 5))), ("w", mark((0, 100)))],
        {},
    ),
    (
        "topics kept apart",
        [("c", (0, 1, src(W, 0, 5))), ("c", (0, 2, src(P, 0, 9))), ("w", mark((0, 3)))],
        {(W, 0): 5, (P, 0): 9},
    ),
]


@pytest.mark.parametrize(("log", "expected"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_a_partition_restarts_at_the_highest_floor_a_watermark_covers(
    log: list[tuple[str, object]], expected: dict[tuple[str, int], int]
) -> None:
    coverage = Coverage()
    for kind, what in log:
        if kind == "w":
            assert isinstance(what, LogWatermark)
            coverage.watermark(what)
        else:
            assert isinstance(what, tuple)
            coverage.change(*what)
    assert coverage.floors() == expected


def test_the_fold_keeps_few_steps_between_watermarks() -> None:
    coverage = Coverage()
    for offset in range(1000):
        coverage.change(0, offset, src(W, 0, offset))
        if offset % 100 == 99:
            coverage.watermark(mark((0, offset + 1)))
    assert coverage.floors() == {(W, 0): 999}
    assert len(coverage.steps[(0, W, 0)]) == 1


# (floor, low, high, committed) -> (offset, moved, gone)
STARTS = [
    ("the log's floor, below what the group committed", (40, 0, 100, 90), (40, True, 0)),
    ("a committed offset below the floor is left", (40, 0, 100, 30), (30, False, 0)),
    ("no floor: the earliest kept", (None, 12, 100, 90), (12, True, 0)),
    ("no committed offset: the group reads from the earliest anyway", (40, 0, 100, None), (40, False, 0)),
    ("retention deleted part of what is asked", (40, 55, 100, 90), (55, True, 15)),
    ("an empty partition", (None, 0, 0, None), (0, False, 0)),
    ("never past the end", (120, 0, 100, 100), (100, False, 0)),
]


@pytest.mark.parametrize(("given", "expected"), [(c[1], c[2]) for c in STARTS], ids=[c[0] for c in STARTS])
def test_only_what_a_group_read_is_read_again_and_a_deleted_start_is_named(
    given: tuple[int | None, int, int, int | None], expected: tuple[int, bool, int]
) -> None:
    floor, low, high, committed = given
    got = start((W, 0), floor, low, high, committed)
    assert (got.offset, got.moved, got.gone) == expected
    sent_from, sent_to = got.again  # what was read already: sent again (operate/recover/redrive.py)
    assert sent_from == got.offset
    assert sent_to - sent_from == (min(high, committed) - got.offset if got.moved and committed else 0)
    if got.gone:
        assert "deleted" in got.why() and f"{W}[0]" in got.why()


# (snapshots as (Redis ms, covers), oldest outbox entry ms) -> the snapshot chosen (its ms) or None
CHOOSE = [
    ("every outbox empty: the newest", ([(1000, 5), (5000, 9)], None), 5000),
    ("an entry older than every snapshot: none", ([(1000, 5), (5000, 9)], 900), None),
    ("an entry between: the one before it, with the skew", ([(1000, 5), (5000, 9)], 4000), 1000),
    ("within the skew of a snapshot: not that one", ([(1000, 5)], 1000 + relay_watermark.SKEW_MS), None),
    ("past the skew", ([(1000, 5)], 1001 + relay_watermark.SKEW_MS), 1000),
]


@pytest.mark.parametrize(("given", "expected"), [(c[1], c[2]) for c in CHOOSE], ids=[c[0] for c in CHOOSE])
def test_a_watermark_never_vouches_for_a_moment_an_outbox_entry_still_predates(
    given: tuple[list[tuple[int, int]], int | None], expected: int | None
) -> None:
    snaps, oldest = given
    chosen = relay_watermark.choose([Snapshot(ms, ((0, end),)) for ms, end in snaps], oldest)
    assert (chosen.at_ms if chosen else None) == expected


def test_the_relay_publishes_a_watermark_only_when_it_says_more() -> None:
    marks = Watermarks("host-1")
    marks.take({0: 5, 1: 2}, 1000)
    first = marks.due(None)
    assert first is not None and first.covers == ((0, 5), (1, 2))
    assert first.record_id == "watermark:host-1:1000"
    marks.take({0: 5, 1: 2}, 3000)
    assert marks.due(None) is None  # nothing more appended
    marks.take({0: 7, 1: 2}, 5000)
    assert marks.due(4000) is None  # an entry from before 5000 still waits
    marks.take({0: 9, 1: 2}, 8000)
    late = marks.due(7000)  # the snapshot of 5000 is vouched for now
    assert late is not None and late.covers == ((0, 7), (1, 2))
    assert LogWatermark.decode(late.encode()) == late


KEEP = [
    ("kept forever", {W: Kept(-1, "delete")}, 0.0, []),
    ("a week", {W: Kept(7 * 86_400_000, "delete")}, 0.0, []),
    ("an hour: too little", {W: Kept(3_600_000, "delete")}, 0.0, ["retention.ms=86400000"]),
    ("compacted", {P: Kept(-1, "compact")}, 0.0, ["cleanup.policy=delete"]),
    ("a relay behind half the retention", {P: Kept(2 * 86_400_000, "delete")}, 86_401.0, ["behind"]),
    ("unreadable", {W: None}, 0.0, ["could not be read"]),
]


@pytest.mark.parametrize(
    ("kept", "lag", "said"), [(c[1], c[2], c[3]) for c in KEEP], ids=[c[0] for c in KEEP]
)
def test_a_redriven_topic_that_keeps_too_little_is_named_with_what_to_set(
    kept: dict[str, Kept | None], lag: float, said: list[str]
) -> None:
    found = redrive_retention.problems(kept, lag)
    assert len(found) == len(said)
    for problem, words in zip(found, said, strict=True):
        assert words in problem and next(iter(kept)) in problem


def test_a_change_written_before_schema_4_still_decodes_with_no_source() -> None:
    old = (
        b'{"schema_version":3,"record_id":"t:1","task_id":"t","state_version":1,"message_id":"m",'
        b'"stage":"received","task_version":1,"at":"2026-01-01T00:00:00Z"}'
    )
    record = OutboxRecord.decode(old)
    assert record.source is None and record.schema_version == OutboxRecord.SCHEMA
    made = record.model_copy(update={"source": src(W, 2, 7)})
    assert OutboxRecord.decode(made.encode()).source == src(W, 2, 7)


SIGNER = LogSigner("log-1", Ed25519PrivateKey.from_private_bytes(b"\x02" * 32))


def log_message(records: list[bytes], headers: list[tuple[str, str | bytes | None]]) -> Message:
    value = LOG_BATCH_HEAD + b",".join(records) + LOG_BATCH_TAIL
    return Message(topic=topics.LOG, partition=0, offset=7, value=value, headers=headers)


TAG = RoleSigner("relay", "relay-k1", b"r" * 32)


def read_watermarks(message: Message) -> Read:
    """The message read as recover's first read reads it (tagged by the relay's channel key)."""
    read = Read(log_keys={SIGNER.key_id: SIGNER.public()}, signed_in={0})
    tagged = Message(
        topic=topics.LOG,
        partition=0,
        offset=7,
        value=message.value(),
        headers=[*(message.headers() or []), *TAG.headers(topics.LOG, b"", message.value() or b"")],
    )
    decode: log_reader.Decode[Mark] = log_marks
    log_reader._decoded(
        RoleKeys({"relay-k1": ("relay", b"r" * 32)}), topics.LOG, tagged, read, decode, cover=lambda *_: None
    )
    return read


def test_a_watermark_counts_only_with_the_relays_log_signature() -> None:
    record = mark((0, 9)).encode()
    signed = read_watermarks(log_message([record], SIGNER.headers(topics.LOG, [record])))
    assert signed.coverage.covers == {0: 9} and signed.unvouched == []
    forged = record.replace(b"[[0,9]]", b"[[0,99]]")  # a watermark claiming more than the relay said
    edited = read_watermarks(log_message([forged], SIGNER.headers(topics.LOG, [record])))
    unsigned = read_watermarks(log_message([record], []))
    for refused in (edited, unsigned):  # the whole message is refused: none of its records is read
        assert refused.coverage.covers == {} and refused.coverage.watermarks == 0
        assert refused.unsigned == 1 and refused.unsigned_named[0].startswith("0:7: ")


def test_a_watermark_is_no_task_record_for_the_fold() -> None:
    value = LOG_BATCH_HEAD + mark((0, 9)).encode() + LOG_BATCH_TAIL
    assert log_items(value) == ([], [], 0)


def test_the_first_read_passes_over_a_watermark_and_keeps_each_changes_source() -> None:
    old = (
        b'{"schema_version":3,"record_id":"t-1:1","task_id":"t-1","state_version":1,"message_id":"m",'
        b'"stage":"received","task_version":1,"at":"2026-01-01T00:00:00Z"}'
    )
    sourced = OutboxRecord.decode(old).model_copy(update={"source": src(W, 2, 7)})
    unsourced = OutboxRecord.decode(old).model_copy(update={"record_id": "t-1:2"})
    value = LOG_BATCH_HEAD + b",".join([mark((0, 9)).encode(), sourced.encode(), unsourced.encode()])
    sources: list[MessageSource] = []
    marks, problems, _ = log_marks(value + LOG_BATCH_TAIL, sources)
    versions = [(t, m.version if isinstance(m, ChangeMark) else None) for t, m in marks]
    assert versions == [("t-1", 1), ("t-1", 1)] and problems == []
    assert sources == [src(W, 2, 7)]
