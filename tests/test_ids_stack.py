"""Ids from outside, sent to the real stack: neither a 60 KB task id nor one holding a brace names a
Redis key (each is dead-lettered at the door with its reason) and a genuine event behind them still
gets its receipt; Redis runs with a memory limit and refuses writes when full instead of evicting
state. The rules themselves: tests/unit/test_ids.py."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer
from helpers import kafka_as, topic_marks, wait_letter
from unit.test_ids import attacker_event

from wakeful.core import topics
from wakeful.core.kafka_rights import UPSTREAM
from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import REQUESTER, Client
from wakeful.producers.signing import sign_event
from wakeful.schemas import events

DEADLINE_S = 120.0


def letter_of(event_id: str) -> Callable[[dict[str, Any]], bool]:
    return lambda letter: letter.get("source") == "inbound" and event_id in letter.get("raw", "")


def test_redis_refuses_writes_when_full_instead_of_evicting_state(client: Client) -> None:
    config = {str(k): str(v) for k, v in client.admin.config_get("maxmemory*").items()}
    assert config["maxmemory-policy"] == "noeviction"
    assert int(config["maxmemory"]) > 0


def test_outside_ids_never_name_a_redis_key_and_a_genuine_event_still_gets_its_receipt(
    client: Client, shared_fleet: Fleet, kafka_bootstrap: str
) -> None:
    since = topic_marks(kafka_bootstrap, topics.DLQ)
    mark = uuid.uuid4().hex
    huge = attacker_event(task_id="a" * 60_000, event_id=f"ev-huge-{mark}")
    brace = attacker_event(task_id="X}:lease", event_id=f"ev-brace-{mark}")
    genuine = sign_event(
        client.signer(REQUESTER),
        events.CREATE,
        {"amount": 10, "currency": "EUR"},
        task_id=f"t-ids-{mark[:10]}",
    )
    producer = Producer(kafka_as(kafka_bootstrap, UPSTREAM) | {"acks": "all"})
    for value in (huge, brace, genuine.encode()):  # one partition: the genuine event waits behind them
        producer.produce(topics.EVENTS, key=b"attacker", value=value, partition=0)
    assert producer.flush(30) == 0

    receipt = client.receipt(genuine.event_id, genuine.task_id, timeout=DEADLINE_S, key_id=genuine.key_id)
    assert receipt["status"] == "accepted", receipt
    for name, value in (("huge", huge), ("brace", brace)):
        found = wait_letter(kafka_bootstrap, since, letter_of(f"ev-{name}-{mark}"), DEADLINE_S)
        assert found is not None, f"the {name} event is not on {topics.DLQ}"
        letter, _ = found
        assert letter["reason"].startswith("malformed event: task_id"), letter["reason"]
        assert letter["task_id"] is None and letter["raw"] == value.decode()

    names = [bytes(k) for k in client.admin.scan_iter(count=1000)]
    assert names, "the scan saw no keys at all"
    too_long = [n[:80] for n in names if len(n) > 200]
    assert not too_long, f"keys over 200 bytes: {too_long}"
    forged = [n for n in names if n.count(b"{") > 1 or n.count(b"}") > 1 or mark.encode() in n]
    assert not forged, f"keys named by the attacker: {forged}"
