"""A test app whose tool produces to a Kafka downstream (D123): `announce` writes one notice for its
task to the example `notices` downstream's topic, logged in with the delegation token minted for its
step (`login(credential())`, producers/kafka_tokens.py), and reaches the cluster only by its
declared egress."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from egress_app import WORKING, Finish, fetch
from kafka import KafkaProducer
from pydantic import BaseModel, ConfigDict

from wakeful.examples.downstreams import NOTICES
from wakeful.producers.kafka_tokens import login
from wakeful.sdk import App, Tool
from wakeful.sdk import credential as step_credential

TOPIC = NOTICES.writes[0]


class AnnounceArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str


def produce(config: Mapping[str, object], topic: str, key: str, value: bytes) -> int:
    """Produce one message with a token's login; its offset."""
    producer = KafkaProducer(**{"request_timeout_ms": 10_000, "max_block_ms": 10_000, **config})
    try:
        return int(producer.send(topic, key=key.encode(), value=value).get(timeout=20).offset)
    finally:
        producer.close(timeout=5)


class Announce(Tool[AnnounceArgs]):
    name, args, stages = "announce", AnnounceArgs, (WORKING,)
    description = "Publish one notice for the task to the notices topic."
    egress = ("notices",)
    credential = "notices"

    def call(self, op_key: str, args: AnnounceArgs, fence: int) -> Mapping[str, str]:
        offset = produce(login(step_credential()), TOPIC, op_key, args.task_id.encode())
        return {"offset": str(offset)}

    def lookup(self, op_key: str) -> Mapping[str, str] | None:
        return None


notify = replace(fetch, name="notify")  # egress_app's loop: its tools, then finish

app = App(name="notices", workflows=[notify], tools=[Announce(), Finish()])
