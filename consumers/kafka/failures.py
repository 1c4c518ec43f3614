"""Which failures of Kafka and Redis are worth waiting out, and a loop that waits them out.

A role retries what can pass (a server away, a leader moving, a full local queue) and dead-letters
or exits on what cannot; core/retry.py holds the Retry request and the backoff every layer shares.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from enum import StrEnum

import redis
from confluent_kafka import KafkaError, KafkaException

from wakeful.core.retry import backoff

# Failures of the servers themselves: worth waiting out, never a reason to drop work. A
# KafkaException is only as transient as classify() says: see is_transient().
TRANSIENT_IO = (redis.ConnectionError, redis.TimeoutError, KafkaException, BufferError)
# A Redis that answers but cannot do it now: read-only or without a master (failing over), out of
# memory (until an operator purges or raises maxmemory), or a cluster moving a slot.
TRANSIENT_REDIS = (
    redis.exceptions.ReadOnlyError,
    redis.exceptions.OutOfMemoryError,
    redis.exceptions.TryAgainError,
    redis.exceptions.MasterDownError,
    redis.exceptions.ClusterDownError,
)


class Verdict(StrEnum):
    """What to do about a Kafka error on a produce or a delivery."""

    TRANSIENT = "transient"  # the same request can succeed later: wait, then send or read it again
    PERMANENT = "permanent"  # it never will: dead-letter the input it came from, and move on
    FATAL = "fatal"  # the client itself is finished: exit, and let a new process start over


_E = KafkaError
# Where the error's own flags are absent or wrong. confluent-kafka sets retriable(), fatal() and
# txn_requires_abort() only on errors from librdkafka's error objects (transactions, error_cb); a
# delivery report or a produce() exception carries a bare code, every flag False. And the protocol
# calls some of these retriable (INVALID_MSG, UNKNOWN_TOPIC_OR_PART) when resending the same bytes
# to the same topic cannot help.
PERMANENT_CODES = frozenset(
    {
        _E.MSG_SIZE_TOO_LARGE,  # over the producer's message.max.bytes or the topic's max.message.bytes
        _E.RECORD_LIST_TOO_LARGE,
        _E.INVALID_MSG,  # CORRUPT_MESSAGE: the same bytes stay corrupt
        _E.INVALID_MSG_SIZE,
        _E.INVALID_RECORD,
        _E.INVALID_TIMESTAMP,
        _E.INVALID_REQUIRED_ACKS,
        _E.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        _E.UNSUPPORTED_COMPRESSION_TYPE,
        _E.UNSUPPORTED_VERSION,
        _E.POLICY_VIOLATION,
        _E.TOPIC_AUTHORIZATION_FAILED,
        _E.CLUSTER_AUTHORIZATION_FAILED,
        # wakeful's topics are fixed: created up front, broker auto-creation off. One that is
        # missing stays missing until an operator acts.
        _E.UNKNOWN_TOPIC_OR_PART,
        _E._UNKNOWN_TOPIC,
        _E._UNKNOWN_PARTITION,
        _E._BAD_MSG,
        _E._INVALID_ARG,
        _E._INVALID_DIFFERENT_RECORD,
        _E._KEY_SERIALIZATION,
        _E._VALUE_SERIALIZATION,
    }
)
# The idempotent producer's identity is gone (fenced, epoch or sequence lost): this client can
# deliver nothing more in order, but a new one can.
FATAL_CODES = frozenset(
    {
        _E._FATAL,
        _E._FENCED,
        _E.PRODUCER_FENCED,
        _E.INVALID_PRODUCER_EPOCH,
        _E.INVALID_PRODUCER_ID_MAPPING,
        _E.OUT_OF_ORDER_SEQUENCE_NUMBER,
        _E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
)
# Broker errors that pass on their own: leaders move, replicas catch up, quotas refill. librdkafka
# retries these itself, so they reach us only once its own retries are spent.
TRANSIENT_CODES = frozenset(
    {
        _E.NOT_ENOUGH_REPLICAS,
        _E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        _E.LEADER_NOT_AVAILABLE,
        _E.NOT_LEADER_FOR_PARTITION,
        _E.PREFERRED_LEADER_NOT_AVAILABLE,
        _E.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        _E.REPLICA_NOT_AVAILABLE,
        _E.BROKER_NOT_AVAILABLE,
        _E.REQUEST_TIMED_OUT,
        _E.NETWORK_EXCEPTION,
        _E.KAFKA_STORAGE_ERROR,
        _E.THROTTLING_QUOTA_EXCEEDED,
        _E.FENCED_LEADER_EPOCH,
        _E.UNKNOWN_LEADER_EPOCH,
        _E.CONCURRENT_TRANSACTIONS,
        _E.COORDINATOR_LOAD_IN_PROGRESS,
        _E.COORDINATOR_NOT_AVAILABLE,
        _E.NOT_COORDINATOR,
        _E.NOT_CONTROLLER,
        _E.REBALANCE_IN_PROGRESS,
    }
)


def classify(err: KafkaError) -> Verdict:
    """Whether a Kafka error on a produce or a delivery can pass, can never pass, or ends the client.

    The tables above first, where the flags are absent or wrong; then the error's own flags. An
    error in neither: a broker's answer (code > 0) is final, because librdkafka has already retried
    whatever it could; a local one (code < 0: timeouts, a broker away, a queue purged on shutdown)
    describes this client's moment, not the message, and passes.
    """
    code = err.code()
    if is_fatal(err):
        return Verdict.FATAL
    if code in PERMANENT_CODES:
        return Verdict.PERMANENT
    if code in TRANSIENT_CODES or err.retriable() or err.txn_requires_abort():
        return Verdict.TRANSIENT
    return Verdict.PERMANENT if code > 0 else Verdict.TRANSIENT


def is_fatal(err: KafkaError) -> bool:
    """Whether `err` ends its client. The fatal-error event librdkafka hands a consumer's poll
    (code _FATAL: fenced by a static member of the same group.instance.id, say) comes with
    fatal() False, so the code is read too."""
    return err.fatal() or err.code() in FATAL_CODES


def kafka_error(exc: BaseException) -> KafkaError | None:
    """The KafkaError a KafkaException carries (None for any other exception)."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def is_transient(exc: BaseException) -> bool:
    """Whether waiting can make this failure pass: Redis or Kafka away, a full local queue, or a
    Kafka error that classify() calls transient. A refusal that can never succeed is not."""
    err = kafka_error(exc)
    if err is not None:
        return classify(err) is Verdict.TRANSIENT
    return isinstance(exc, TRANSIENT_IO + TRANSIENT_REDIS)


def outliving_refusals(step: Callable[[], bool], log: Callable[..., None], event: str) -> Callable[[], bool]:
    """`step`, for a loop that something open depends on: a Redis refusal that waiting cannot
    pass (a user without this release's rights, say) is logged as `event` and read as nothing to
    do, so the loop looks again after its idle wait rather than ending; what can pass is raised
    for forever() to wait out."""

    def tolerant() -> bool:
        try:
            return step()
        except redis.RedisError as exc:
            if is_transient(exc):
                raise
            log(event, error=repr(exc))
            return False

    return tolerant


def forever(
    step: Callable[[], bool],
    stop: threading.Event,
    log: Callable[..., None],
    idle: float | Callable[[], float],
    nudge: threading.Event | None = None,
) -> None:
    """Run step() until stop is set, waiting `idle` seconds (or what `idle()` says then) whenever
    it returns False (nothing to do), or less if `nudge` is set meanwhile (another thread made work
    for it; the loop then ends at most `idle` after stop is set). A transient error (Redis or
    Kafka away, e.g. while a server restarts, or a Redis out of memory) is logged and retried with
    backoff instead of ending the loop; a Kafka refusal that can never succeed is raised: retrying
    it would only hide it."""
    attempt = 0
    while not stop.is_set():
        try:
            busy = step()
            attempt = 0
        except TRANSIENT_IO + TRANSIENT_REDIS as exc:
            if not is_transient(exc):
                raise
            attempt += 1
            if attempt in (1, 10) or attempt % 50 == 0:
                log("loop.retry", attempt=attempt, error=repr(exc))
            stop.wait(backoff(attempt))
            continue
        if not busy and not stop.is_set():
            (nudge or stop).wait(idle() if callable(idle) else idle)
            if nudge is not None:
                nudge.clear()
