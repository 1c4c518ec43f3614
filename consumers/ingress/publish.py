"""How the HTTP door publishes: one idempotent acks=all producer, logged in as the `ingress`
principal (it may write wakeful.events and nothing else), whose delivery reports settle asyncio
futures so that a request waits for its own acknowledgement without holding a thread.

The bytes published are those the door judged, as they came (a webhook inside its record): the door
re-signs nothing and re-encodes nothing. Each event is keyed by its routing key (correlation id,
else task id, else event id) with the Java client's partitioner, as the publisher SDK keys it.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from wakeful.core import kafka_auth, topics, tracing
from wakeful.core.log import Log
from wakeful.core.settings import Settings
from wakeful.producers.publish import HEADER_EVENT_ID, confluent_config

POLL_S = 0.05


class EventPublisher:
    def __init__(self, settings: Settings, log: Log) -> None:
        security = kafka_auth.client_config(settings, "ingress")
        bootstrap = security.pop("bootstrap.servers")
        self._producer = Producer(confluent_config(bootstrap, security))
        self._log = log
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, name="ingress-producer", daemon=True)
        self._poller.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(POLL_S)

    async def publish(self, key: str, value: bytes, event_id: str, timeout: float) -> str | None:
        """Publish and wait for the broker's acknowledgement: None once acked, else why not (nothing
        may have been published; it may still arrive late after a time-out, and inbound drops a
        duplicate by its event id)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[str | None] = loop.create_future()

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            loop.call_soon_threadsafe(_settle, done, None if err is None else err.str())

        try:
            self._producer.produce(
                topics.EVENTS,
                key=key.encode(),
                value=value,
                headers=tracing.inject({HEADER_EVENT_ID: event_id.encode()}),  # the request's span
                on_delivery=delivered,
            )
        except BufferError:
            return "the door's send queue is full"
        except KafkaException as exc:
            return f"Kafka refused the event: {exc}"
        try:
            return await asyncio.wait_for(asyncio.shield(done), timeout)
        except TimeoutError:
            return f"Kafka did not acknowledge the event within {timeout:.0f}s"

    def close(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._poller.join(timeout=1.0)
        left = self._producer.flush(timeout)
        if left:
            self._log("ingress.unflushed", messages=left)


def _settle(done: asyncio.Future[Any], outcome: str | None) -> None:
    if not done.done():
        done.set_result(outcome)
