"""The publisher SDK: upstream systems put signed events on wakeful.events.

One small interface, two clients: `ConfluentPublisher` (confluent-kafka, a native wheel) and
`KafkaPythonPublisher` (kafka-python, pure Python). Both

- refuse an unsigned or oversize event before anything is sent; a batch is checked whole first;
- key each event by its routing key (correlation id, else task id) and hash it with murmur2, the Java
  client's partitioner, so one key lands on one partition whichever client sent it;
- return only after the broker acknowledged every event (acks=all, idempotent producer);
- write the client library's own log lines as wakeful's `kafka.log` records (core/log.py);
- log in with the `security` settings given (a SASL user that may write wakeful.events and no
  other topic: wakeful.core.kafka_auth builds them for the `upstream` principal); a refused login
  is a PermissionRefused that says so, not a time-out.

An event that timed out may still arrive later. Publishing it again is safe: the inbound role
drops duplicates by event_id.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from confluent_kafka import KafkaError as ConfluentKafkaError
from confluent_kafka import KafkaException, Message, Producer

from wakeful.core import topics, tracing
from wakeful.core.errors import ConfigError, PermissionRefused, PublishError, ServerUnavailable
from wakeful.core.log import librdkafka_config, route_client_logs
from wakeful.schemas.events import MAX_EVENT_BYTES, SignedEvent

HEADER_EVENT_ID = "event_id"
_START_HINT = "Start it with `wakeful dev up` or fix the bootstrap address."


class Publisher(Protocol):
    """Publishes signed events; a call returns only after the broker acknowledged all of them."""

    def publish(self, event: SignedEvent, timeout: float = 10.0) -> None: ...

    def publish_many(self, events: Iterable[SignedEvent], timeout: float = 10.0) -> None: ...

    def close(self) -> None: ...


def wire_value(event: SignedEvent) -> bytes:
    """The bytes published for `event`; PublishError if it must not leave this process."""
    if not event.signature:
        raise PublishError(
            (event.event_id,),
            "is unsigned: build it with wakeful.producers.signing.sign_event",
            retryable=False,
        )
    value = event.encode()
    if len(value) > MAX_EVENT_BYTES:
        raise PublishError(
            (event.event_id,),
            f"encodes to {len(value)} bytes, over the {MAX_EVENT_BYTES}-byte limit: "
            "store bulky content elsewhere and send a reference in the payload",
            retryable=False,
        )
    return value


def _checked(events: Iterable[SignedEvent]) -> list[tuple[SignedEvent, bytes]]:
    return [(event, wire_value(event)) for event in events]


class _Outcomes:
    """What the broker said about each event of one batch; raises one PublishError for the failures."""

    def __init__(self, size: int) -> None:
        self.acked: set[int] = set()
        self.refused: dict[int, tuple[str, bool]] = {}  # index -> (error, retryable)
        self.size = size

    @property
    def settled(self) -> bool:
        return len(self.acked) + len(self.refused) == self.size

    def raise_failures(self, batch: list[tuple[SignedEvent, bytes]], where: str, timeout: float) -> None:
        if len(self.acked) == self.size:
            return
        failed = tuple(e.event_id for i, (e, _) in enumerate(batch) if i not in self.acked)
        again = "publish again (the inbound role drops duplicates by event_id)"
        if self.refused:
            error, _ = next(iter(self.refused.values()))
            problem = f"{len(failed)} of {self.size} not acknowledged (first error: {error}); {again}"
            retryable = all(r for _, r in self.refused.values())
        else:
            problem = (
                f"not acknowledged within {timeout}s: check that Kafka is reachable at {where}, then "
                f"{again}; it may still arrive"
            )
            retryable = True
        raise PublishError(failed, problem, retryable=retryable)


def confluent_config(bootstrap: str, security: Mapping[str, Any] | None = None) -> dict[str, object]:
    return (
        dict(security or {})
        | {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 1,  # an event wakes a task: latency first
            # librdkafka's default (consistent_random, CRC32) would put a key on another partition than
            # kafka-python and the Java client do.
            "partitioner": "murmur2_random",
            # wakeful creates its topics; a mistyped topic name must fail, not appear.
            "allow.auto.create.topics": False,
        }
        | librdkafka_config()
    )


class ConfluentPublisher:
    """Publisher on confluent-kafka. Safe to share between threads."""

    def __init__(
        self,
        bootstrap: str,
        topic: str = topics.EVENTS,
        connect_timeout: float = 10.0,
        security: Mapping[str, Any] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        refused: list[str] = []

        def on_error(err: ConfluentKafkaError) -> None:
            if err.code() == ConfluentKafkaError._AUTHENTICATION:
                refused.append(err.str())

        self._producer = Producer(confluent_config(bootstrap, security) | {"error_cb": on_error})
        try:
            found = self._producer.list_topics(topic, timeout=connect_timeout).topics.get(topic)
        except KafkaException as exc:
            self._producer.poll(0)  # write the lines that say why before the client is dropped
            if refused:
                raise _refused((security or {}).get("sasl.username"), refused[0]) from exc
            raise ServerUnavailable("Kafka", bootstrap, _START_HINT) from exc
        if found is None or found.error is not None:
            raise _missing_topic(topic, bootstrap)

    def publish(self, event: SignedEvent, timeout: float = 10.0) -> None:
        self.publish_many((event,), timeout)

    def publish_many(self, events: Iterable[SignedEvent], timeout: float = 10.0) -> None:
        batch = _checked(events)
        deadline = time.monotonic() + timeout
        outcomes = _Outcomes(len(batch))
        for i, (event, value) in enumerate(batch):
            if not self._produce(event, value, deadline, _on_delivery(outcomes, i)):
                outcomes.refused.update(
                    (j, ("the local send queue stayed full", True)) for j in range(i, len(batch))
                )
                break
        # Poll in short steps: another thread may serve this batch's delivery reports.
        while not outcomes.settled and (remaining := deadline - time.monotonic()) > 0:
            self._producer.poll(min(remaining, 0.05))
        outcomes.raise_failures(batch, self.bootstrap, timeout)

    def close(self, timeout: float = 10.0) -> None:
        self._producer.flush(timeout)

    def _produce(
        self,
        event: SignedEvent,
        value: bytes,
        deadline: float,
        on_delivery: Callable[[ConfluentKafkaError | None, Message], None],
    ) -> bool:
        while True:
            try:
                self._producer.produce(
                    self.topic,
                    key=event.routing_key.encode(),
                    value=value,
                    # the sender's trace goes on in the roles, if it has one (docs/tracing.md)
                    headers=tracing.carried({HEADER_EVENT_ID: event.event_id.encode()}),
                    on_delivery=on_delivery,
                )
                return True
            except BufferError:
                if time.monotonic() >= deadline:
                    return False
                self._producer.poll(0.05)


def _on_delivery(outcomes: _Outcomes, index: int) -> Callable[[ConfluentKafkaError | None, Message], None]:
    def delivered(err: ConfluentKafkaError | None, _msg: Message) -> None:
        if err is None:
            outcomes.acked.add(index)
        else:
            outcomes.refused[index] = (err.str(), bool(err.retriable()))

    return delivered


def kafka_python_config(
    bootstrap: str, connect_timeout: float, security: Mapping[str, Any] | None = None
) -> dict[str, object]:
    return dict(security or {}) | {
        "bootstrap_servers": bootstrap,
        "client_id": "wakeful-publisher",
        "acks": "all",
        "enable_idempotence": True,  # needs kafka-python >= 2.2
        "linger_ms": 1,
        "allow_auto_create_topics": False,
        # Bounds the bootstrap, and send()'s wait for metadata or buffer space.
        "bootstrap_timeout_ms": int(connect_timeout * 1000),
        "max_block_ms": int(connect_timeout * 1000),
        # api_version is left unset on purpose: it is probed from the broker. A pinned old version
        # picks protocol versions that Kafka 4 removed (KIP-896): with (0, 10, 2) sends time out.
    }


class KafkaPythonPublisher:
    """Publisher on kafka-python, for systems that avoid native wheels. Safe to share between threads.

    kafka-python is imported when one is made: loading it costs a process about 0.1 s, and every
    role and CLI command that imports this module for the other publisher would pay it."""

    def __init__(
        self,
        bootstrap: str,
        topic: str = topics.EVENTS,
        connect_timeout: float = 10.0,
        security: Mapping[str, Any] | None = None,
    ) -> None:
        from kafka import KafkaProducer
        from kafka.errors import KafkaError, KafkaTimeoutError, SaslAuthenticationFailedError

        self.bootstrap = bootstrap
        self.topic = topic
        route_client_logs()
        try:
            self._producer: Any = KafkaProducer(**kafka_python_config(bootstrap, connect_timeout, security))
        except SaslAuthenticationFailedError as exc:
            raise _refused((security or {}).get("sasl_plain_username"), str(exc)) from exc
        except KafkaError as exc:
            raise ServerUnavailable("Kafka", bootstrap, _START_HINT) from exc
        try:
            self._producer.partitions_for(topic)
        except KafkaTimeoutError as exc:
            self._producer.close(timeout=0)
            raise _missing_topic(topic, bootstrap) from exc

    def publish(self, event: SignedEvent, timeout: float = 10.0) -> None:
        self.publish_many((event,), timeout)

    def publish_many(self, events: Iterable[SignedEvent], timeout: float = 10.0) -> None:
        from kafka.errors import KafkaError

        batch = _checked(events)
        deadline = time.monotonic() + timeout
        outcomes = _Outcomes(len(batch))
        futures: list[Any] = []
        for i, (event, value) in enumerate(batch):
            try:
                futures.append(
                    self._producer.send(
                        self.topic,
                        key=event.routing_key.encode(),
                        value=value,
                        headers=tracing.carried([(HEADER_EVENT_ID, event.event_id.encode())]),
                    )
                )
            except KafkaError as exc:  # no metadata or no buffer space within max_block_ms
                outcomes.refused.update((j, (str(exc), exc.retriable)) for j in range(i, len(batch)))
                break
        for i, future in enumerate(futures):
            try:
                future.get(timeout=max(deadline - time.monotonic(), 0.0))
                outcomes.acked.add(i)
            except KafkaError as exc:
                if future.is_done:  # not done means it timed out; raise_failures says so
                    outcomes.refused[i] = (str(exc), exc.retriable)
        outcomes.raise_failures(batch, self.bootstrap, timeout)

    def close(self, timeout: float = 10.0) -> None:
        self._producer.close(timeout=timeout)


def _refused(user: object, why: str) -> PermissionRefused:
    return PermissionRefused(
        f"Kafka refused the credentials of {user or '(no user)'}: {why.splitlines()[0]}; check the "
        "publisher's SASL user and password"
    )


def _missing_topic(topic: str, bootstrap: str) -> ConfigError:
    return ConfigError(
        "topic",
        f"{topic} does not exist at {bootstrap}: create it with `wakeful dev up` "
        "(or wakeful.operate.topics.ensure_topics), or fix the name",
    )
