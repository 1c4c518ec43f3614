"""A dead letter always goes somewhere, and the offset moves on, as pure rules: an error that can
never succeed is never retried as if it could, a dead letter stays under the DLQ's size limit
whatever its input, and the runner, with stand-in clients, dead-letters what is refused for good,
stores its offset and still stops when told to (the real pipeline: tests/test_dead_letters.py).
"""

from __future__ import annotations

import base64
import hashlib
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

import orjson
import pytest
import redis
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from helpers import StandInConsumer
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from wakeful.consumers.kafka.failures import (
    FATAL_CODES,
    PERMANENT_CODES,
    TRANSIENT_CODES,
    Verdict,
    classify,
    forever,
    is_transient,
)
from wakeful.consumers.kafka.producing import DeliveryFailures
from wakeful.consumers.kafka.runner import Runner
from wakeful.core import topics
from wakeful.core.errors import KafkaClientFailed, Stopping
from wakeful.core.log import Log
from wakeful.core.retry import Retry
from wakeful.schemas.logs import DeadLetter

GARBAGE_BYTES = 400 * 1024


def _sha(value: bytes) -> str:
    return hashlib.sha256(value).hexdigest()


# ---- which Kafka errors are worth retrying: a pure rule, table-driven ------------------------

E = KafkaError
PERMANENT, TRANSIENT, FATAL = Verdict.PERMANENT, Verdict.TRANSIENT, Verdict.FATAL


@pytest.mark.parametrize(
    ("code", "flags", "verdict"),
    [
        # Refusals of the message itself: resending the same bytes can never succeed.
        (E.MSG_SIZE_TOO_LARGE, {}, PERMANENT),
        (E.RECORD_LIST_TOO_LARGE, {}, PERMANENT),
        (E.INVALID_MSG, {}, PERMANENT),
        (E.INVALID_RECORD, {}, PERMANENT),
        (E.INVALID_MSG_SIZE, {}, PERMANENT),
        (E.TOPIC_AUTHORIZATION_FAILED, {}, PERMANENT),
        (E.CLUSTER_AUTHORIZATION_FAILED, {}, PERMANENT),
        (E.UNKNOWN_TOPIC_OR_PART, {}, PERMANENT),
        (E._UNKNOWN_TOPIC, {}, PERMANENT),
        (E._UNKNOWN_PARTITION, {}, PERMANENT),
        # The table wins where a flag is wrong: the protocol calls these retriable.
        (E.INVALID_MSG, {"retriable": True}, PERMANENT),
        (E.UNKNOWN_TOPIC_OR_PART, {"retriable": True}, PERMANENT),
        # The broker or the network, which pass on their own (delivery reports carry no flags).
        (E._MSG_TIMED_OUT, {}, TRANSIENT),
        (E._TIMED_OUT, {}, TRANSIENT),
        (E._TRANSPORT, {}, TRANSIENT),
        (E._ALL_BROKERS_DOWN, {}, TRANSIENT),
        (E._QUEUE_FULL, {}, TRANSIENT),
        (E.NOT_ENOUGH_REPLICAS, {}, TRANSIENT),
        (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, {}, TRANSIENT),
        (E.LEADER_NOT_AVAILABLE, {}, TRANSIENT),
        (E.NOT_LEADER_FOR_PARTITION, {}, TRANSIENT),
        (E.REQUEST_TIMED_OUT, {}, TRANSIENT),
        (E.THROTTLING_QUOTA_EXCEEDED, {}, TRANSIENT),
        # The client is finished, whatever the message.
        (E._FATAL, {}, FATAL),
        (E.PRODUCER_FENCED, {}, FATAL),
        (E.OUT_OF_ORDER_SEQUENCE_NUMBER, {}, FATAL),
        (E.MSG_SIZE_TOO_LARGE, {"fatal": True}, FATAL),
        # Codes in no table: the error's own flags, then broker answers final, local states passing.
        (E.INVALID_CONFIG, {"retriable": True}, TRANSIENT),
        (E.INVALID_CONFIG, {"txn_requires_abort": True}, TRANSIENT),
        (E.INVALID_CONFIG, {"fatal": True}, FATAL),
        (E.INVALID_CONFIG, {}, PERMANENT),
        (E._PARTIAL, {}, TRANSIENT),
    ],
    ids=lambda v: str(v) if not isinstance(v, int) else KafkaError(v).name(),
)
def test_a_kafka_error_that_can_never_succeed_is_never_called_transient(
    code: int, flags: dict[str, bool], verdict: Verdict
) -> None:
    assert classify(KafkaError(code, "test", **flags)) is verdict


def test_the_tables_do_not_contradict_each_other() -> None:
    assert not PERMANENT_CODES & TRANSIENT_CODES
    assert not PERMANENT_CODES & FATAL_CODES
    assert not TRANSIENT_CODES & FATAL_CODES


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (KafkaException(KafkaError(E.MSG_SIZE_TOO_LARGE)), False),
        (KafkaException(KafkaError(E.TOPIC_AUTHORIZATION_FAILED)), False),
        (KafkaException(KafkaError(E._FATAL)), False),
        (KafkaException(KafkaError(E._MSG_TIMED_OUT)), True),
        (BufferError("queue full"), True),
        (redis.ConnectionError("refused"), True),
        (redis.exceptions.OutOfMemoryError("over maxmemory"), True),  # until memory is freed
        (redis.exceptions.ReadOnlyError("a replica"), True),  # until a failover ends
        (redis.exceptions.NoPermissionError("NOPERM"), False),  # a user without the rights
        (ValueError("a bug"), False),
    ],
    ids=repr,
)
def test_only_what_can_pass_is_transient(exc: BaseException, transient: bool) -> None:
    assert is_transient(exc) is transient


def test_a_loop_waits_out_a_redis_out_of_memory_and_goes_on() -> None:
    calls: list[int] = []
    stop = threading.Event()

    def step() -> bool:
        calls.append(1)
        if len(calls) == 1:
            raise redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'")
        stop.set()
        return True

    forever(step, stop, lambda *_, **__: None, idle=0.01)  # not raised: the loop lives on
    assert len(calls) == 2


def test_a_loop_step_refused_for_good_is_raised_not_retried_forever() -> None:
    calls: list[int] = []

    def step() -> bool:
        calls.append(1)
        raise KafkaException(KafkaError(E.MSG_SIZE_TOO_LARGE))

    with pytest.raises(KafkaException):
        forever(step, threading.Event(), lambda *_, **__: None, idle=0.01)
    assert len(calls) == 1


# ---- the dead letter's size is bounded whatever the input ------------------------------------


@hsettings(max_examples=150, deadline=None)
@given(
    value=st.one_of(
        st.binary(max_size=3000),
        st.text(max_size=1500).map(str.encode),
        st.integers(0, 200_000).map(lambda n: b"\xff" * n),
        st.integers(0, 100_000).map(lambda n: b"\x00" * n),  # six bytes each as JSON escapes
    ),
    reason=st.text(max_size=5000),
    task_id=st.one_of(st.none(), st.text(max_size=1000)),
    limit=st.integers(0, 300_000),
)
def test_a_dead_letter_never_exceeds_its_limit_and_always_names_its_input(
    value: bytes, reason: str, task_id: str | None, limit: int
) -> None:
    letter = DeadLetter.fitting(limit, source="inbound", reason=reason, task_id=task_id, value=value, at=NOW)
    if letter is None:
        assert limit < 2048  # only a limit smaller than a bare digest leaves nothing to send
        return
    encoded = letter.encode()
    assert len(encoded) <= limit
    assert (letter.size, letter.sha256) == (len(value), hashlib.sha256(value).hexdigest())
    if not letter.digest:  # kept whole: the exact bytes come back
        exact = base64.b64decode(letter.raw_base64) if letter.raw_base64 is not None else letter.raw.encode()
        assert exact == value
    assert DeadLetter.decode(encoded) == letter


def test_garbage_is_kept_as_base64_not_tripled_and_a_huge_one_as_a_digest() -> None:
    small = b"\xff" * 30_000
    whole = DeadLetter.fitting(256 * 1024, source="inbound", reason="r", task_id=None, value=small, at=NOW)
    assert whole is not None and not whole.digest and base64.b64decode(whole.raw_base64 or "") == small
    assert len(whole.encode()) < 1.4 * len(small) + 4096  # base64 and a preview, not 3x
    huge = b"\xff" * GARBAGE_BYTES
    digest = DeadLetter.fitting(256 * 1024, source="inbound", reason="r", task_id=None, value=huge, at=NOW)
    assert digest is not None and digest.digest and digest.raw_base64 is None
    assert digest.sha256 == _sha(huge) and len(digest.encode()) < 8 * 1024


def test_a_version_1_dead_letter_still_reads() -> None:
    v1 = (
        b'{"schema_version":1,"source":"inbound","reason":"r","task_id":null,"raw":"x",'
        b'"at":"2024-01-01T00:00:00Z"}'
    )
    letter = DeadLetter.decode(v1)
    assert (letter.raw, letter.digest, letter.sha256) == ("x", False, None)


# ---- the runner, with stand-in clients --------------------------------------------------------

NOW = datetime(2024, 1, 1, tzinfo=UTC)


class Recorded(Log):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))

    def named(self, event: str) -> list[dict[str, Any]]:
        return [fields for name, fields in self.events if name == event]


class StandInProducer:
    """Takes every produce, except those `refuse` names: then it raises that error, as produce()
    does for a message over the producer's own message.max.bytes."""

    def __init__(self, refuse: dict[str, int] | None = None) -> None:
        self.refuse = refuse or {}
        self.sent: list[tuple[str, bytes | None, bytes]] = []

    def produce(self, topic: str, key: bytes | None = None, value: bytes = b"", **_: Any) -> None:
        if topic in self.refuse:
            raise KafkaException(KafkaError(self.refuse[topic]))
        self.sent.append((topic, key, value))

    def flush(self, _timeout: float) -> int:
        return 0

    def letters(self) -> list[dict[str, Any]]:
        return [orjson.loads(value) for topic, _, value in self.sent if topic == topics.DLQ]


def message(value: bytes, offset: int = 0, key: bytes = b"t-1") -> Message:
    return Message(topic="in", partition=0, offset=offset, key=key, value=value)


def stand_in_runner(
    handler: Callable[[Message], None], producer: StandInProducer, dead_letter_bytes: int | None = None
) -> tuple[Runner, StandInConsumer, Recorded]:
    consumer, log = StandInConsumer(), Recorded()
    runner = Runner(
        "test",
        "in",
        handler,
        cast(Consumer, consumer),
        cast(Producer, producer),
        log=log,
        threads=2,
        dead_letter_bytes=dead_letter_bytes,
    )
    return runner, consumer, log


def test_a_dead_letter_of_oversize_garbage_is_a_digest_under_the_budget() -> None:
    producer = StandInProducer()
    garbage = b"\xff" * GARBAGE_BYTES
    runner, _, _ = stand_in_runner(lambda m: None, producer, dead_letter_bytes=16 * 1024)
    runner.dead_letter(message(garbage, offset=7), "malformed event: too big")
    (topic, _, value), *_ = producer.sent
    letter = orjson.loads(value)
    assert topic == topics.DLQ and len(value) <= 16 * 1024
    assert letter["digest"] and letter["sha256"] == _sha(garbage) and letter["offset"] == 7


def test_a_message_whose_output_is_refused_for_good_is_dead_lettered_and_its_offset_stored() -> None:
    producer = StandInProducer(refuse={"out": E.MSG_SIZE_TOO_LARGE})
    calls: list[bytes] = []

    def handle(m: Message) -> None:
        calls.append(m.value() or b"")
        producer.produce("out", value=m.value() or b"")

    runner, consumer, _ = stand_in_runner(handle, producer)
    runner.run_batch([message(b"a", 0), message(b"b", 1, key=b"t-2")], threading.Event())
    assert sorted(calls) == [b"a", b"b"]  # tried once each, not retried
    assert sorted(letter["raw"] for letter in producer.letters()) == ["a", "b"]
    assert all("MSG_SIZE_TOO_LARGE" in letter["reason"] for letter in producer.letters())
    assert [(tp.partition, tp.offset) for tp in consumer.stored] == [(0, 2)]


def test_a_dead_letter_the_dlq_refuses_for_good_goes_to_the_log_and_the_offset_moves_on() -> None:
    producer = StandInProducer(refuse={topics.DLQ: E.TOPIC_AUTHORIZATION_FAILED})
    runner, consumer, log = stand_in_runner(lambda m: runner.dead_letter(m, "refused"), producer)
    runner.run_batch([message(b"\xff" * 100, 3)], threading.Event())
    (unsent,) = log.named("dead_letter.unsent")
    assert unsent["sha256"] == _sha(b"\xff" * 100) and unsent["offset"] == 3 and unsent["size"] == 100
    assert "TOPIC_AUTHORIZATION_FAILED" in unsent["error"] and "raw" not in unsent
    assert [(tp.partition, tp.offset) for tp in consumer.stored] == [(0, 4)]


def test_a_fatal_kafka_error_ends_the_role_instead_of_retrying() -> None:
    producer = StandInProducer(refuse={"out": E._FATAL})
    runner, consumer, _ = stand_in_runner(lambda m: producer.produce("out", value=b"x"), producer)
    with pytest.raises(KafkaClientFailed):
        runner.run_batch([message(b"a")], threading.Event())
    assert consumer.stored == [] and producer.letters() == []


def test_a_permanent_delivery_refusal_dead_letters_the_input_it_came_from() -> None:
    failures = DeliveryFailures()
    producer = StandInProducer()

    def handle(m: Message) -> None:  # the broker refuses its output later, in a delivery report
        if m.value() == b"big":
            failures.recorder(m)(KafkaError(E.MSG_SIZE_TOO_LARGE), Message(topic="out"))

    runner, consumer, _ = stand_in_runner(handle, producer)
    runner.failures = failures
    runner.run_batch([message(b"big", 0), message(b"ok", 1)], threading.Event())
    (letter,) = producer.letters()
    assert letter["raw"] == "big" and "output to out for good" in letter["reason"]
    assert consumer.seeks == [] and [(tp.partition, tp.offset) for tp in consumer.stored] == [(0, 2)]


def test_a_role_stuck_retrying_a_message_stops_when_told_to() -> None:
    tried = threading.Event()

    def handle(_m: Message) -> None:
        tried.set()
        raise Retry("redis is away", after=30)  # a long wait: only the stop event can cut it short

    runner, consumer, _ = stand_in_runner(handle, StandInProducer())
    stop = threading.Event()
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            runner.run_batch([message(b"a"), message(b"b", 1, key=b"t-2")], stop)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    assert tried.wait(10)
    stop.set()
    thread.join(10)
    assert not thread.is_alive(), "the retry loop did not notice the stop"
    assert len(outcome) == 1 and isinstance(outcome[0], Stopping)
    assert consumer.stored == []
