"""`wakeful dlq` on the real stack, as an operator runs it and as an outsider attacks it.

An upstream event dead-lettered at the door because its signer was not registered yet is replayed
once the signer is: the task is made, the replay is recorded, and a second replay is refused. One
past its max age goes back inside the operator's signed wrapper. A letter forged onto the topic, a
wrapper nobody may send, and a replay of an event its task applied already change nothing.
"""

from __future__ import annotations

import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from cli_run import doc, wakeful
from confluent_kafka import KafkaError, Message, Producer
from helpers import BankClient, kafka_as, topic_marks, wait_letter

from wakeful.core import topics
from wakeful.core.process import wait_until
from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import REQUESTER
from wakeful.producers.keys import generate_signer
from wakeful.producers.signing import Ed25519Signer, sign_event
from wakeful.schemas import events
from wakeful.schemas.events import Envelope, SignedEvent
from wakeful.schemas.logs import DeadLetter
from wakeful.state import keys
from wakeful.workflow import replays

pytestmark = pytest.mark.timeout(240)

OPERATOR = "ops-oncall"  # the dev signer that may send event.replay (`authority init`)
SETTLE_S = 60.0


def unregistered(client: BankClient) -> tuple[str, Ed25519Signer]:
    """A new upstream principal with a key in the keystore that no registry knows yet."""
    principal = f"svc-late-{uuid.uuid4().hex[:8]}"
    path = client.keystore() / f"{principal}.key"
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return principal, generate_signer(f"key-{principal}", path)


def create(signer: Ed25519Signer, task: str, issued_at: datetime | None = None) -> SignedEvent:
    payload = {"amount": 120, "currency": "EUR"}
    return sign_event(signer, events.CREATE, payload, task_id=task, issued_at=issued_at)


def listed(*options: str) -> list[dict[str, Any]]:
    result = wakeful("dlq", "list", "--json", *options)
    assert result.returncode == 0, result.stderr
    found: list[dict[str, Any]] = orjson.loads(result.stdout)
    return found


def letter_of(task: str, timeout: float = 60, source: str = "inbound") -> dict[str, Any]:
    """`source`'s letter about `task`, as `wakeful dlq list` shows it."""
    found: list[dict[str, Any]] = []

    def seen() -> bool:
        found[:] = listed("--task", task, "--source", source)
        return bool(found)

    assert wait_until(seen, timeout), f"no letter about {task} on {topics.DLQ}"
    return found[-1]


def replay(letter: str, *more: str) -> subprocess.CompletedProcess[str]:
    return wakeful(
        "dlq", "replay", letter, "--by", OPERATOR, "--reason", "its signer is registered now", *more
    )


def replays_kept(client: BankClient) -> int:
    return int(client.admin.xlen(keys.DLQ_REPLAYS))


def forge_letter(client: BankClient, letter: DeadLetter) -> str:
    """Write `letter` to wakeful.dlq as the admin (who may write any topic): its id."""
    producer = Producer(kafka_as(client.settings.kafka_bootstrap))
    placed: list[str] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            placed.append(replays.letter_id(msg.partition() or 0, msg.offset() or 0))

    producer.produce(topics.DLQ, value=letter.encode(), on_delivery=delivered)
    producer.flush(10)
    assert placed, "the admin could not write to wakeful.dlq"
    return placed[0]


def test_an_event_refused_for_an_unregistered_signer_is_replayed_once_the_signer_is(
    client: BankClient, shared_fleet: Fleet
) -> None:
    principal, signer = unregistered(client)
    task = f"t-{uuid.uuid4().hex[:12]}"
    event = create(signer, task)
    client.publisher.publish(event)
    letter = letter_of(task)
    assert f"unknown key id 'key-{principal}'" in letter["reason"]
    assert (letter["replayable"], letter["replays"]) == ("event", [])
    # Before its cause is fixed, a replay would only be refused again: it is refused here, and writes nothing.
    before = replays_kept(client)
    early = replay(letter["id"])
    assert early.returncode != 0 and "is not registered" in early.stderr
    assert replays_kept(client) == before

    client.add_signer(principal, (events.CREATE,))
    dry = replay(letter["id"], "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert (doc(dry)["action"], doc(dry)["dry_run"]) == ("republished", True)
    assert replays_kept(client) == before
    done = replay(letter["id"], "--json")
    assert done.returncode == 0, done.stderr
    assert doc(done)["action"] == "republished"
    assert doc(done)["event"] == keys.event_identity(event.key_id, event.event_id)

    assert client.wait_settled(task, SETTLE_S)["stage"] == "closed"
    receipt = client.receipt(event.event_id, task, 10, key_id=event.key_id)
    assert receipt["status"] == "accepted"
    shown = wakeful("dlq", "show", letter["id"], "--json")
    assert shown.returncode == 0, shown.stderr
    (record,) = doc(shown)["replays"]
    assert (record["by"], record["action"], record["reason"]) == (
        OPERATOR,
        "republished",
        "its signer is registered now",
    )
    assert listed("--task", task)[-1]["replays"] == [record]

    again = replay(letter["id"])
    assert again.returncode != 0 and "replayed already" in again.stderr and "--again" in again.stderr
    applied = replay(letter["id"], "--again")
    assert applied.returncode != 0 and "applied event" in applied.stderr
    assert replays_kept(client) == before + 1


def test_an_event_past_its_max_age_is_replayed_inside_the_operators_wrapper(
    client: BankClient, shared_fleet: Fleet
) -> None:
    principal, signer = unregistered(client)
    task = f"t-{uuid.uuid4().hex[:12]}"
    stale = datetime.now(UTC) - timedelta(seconds=client.settings.event_max_age + 120)
    event = create(signer, task, issued_at=stale)
    client.publisher.publish(event)
    letter = letter_of(task)
    client.add_signer(principal, (events.CREATE,))

    done = replay(letter["id"], "--json")
    assert done.returncode == 0, done.stderr
    assert doc(done)["action"] == "wrapped" and doc(done)["wrapper"]["key_id"] == f"key-{OPERATOR}"
    cp = client.wait_settled(task, SETTLE_S)
    assert cp["stage"] == "closed"
    assert client.receipt(event.event_id, task, 10, key_id=event.key_id)["status"] == "accepted"

    # The operator's own wrapper again, sent by hand past the CLI's checks: the task's inbox holds
    # the event, so it is not applied twice. A later event on the task's partition marks the point
    # by which the gate has judged it.
    version = client.show(task)["state_version"]
    wrapper = replays.wrap(
        client.signer(OPERATOR), event, event.encode().decode(), letter["id"], now=datetime.now(UTC)
    )
    client.publisher.publish(wrapper)
    marker = client.send(principal, events.CREATE, {"amount": 5, "currency": "EUR"}, task_id=task)
    assert client.receipt(marker.event_id, task, 30, key_id=marker.key_id)["status"] == "rejected"
    assert client.show(task)["state_version"] == version


def test_an_event_the_door_took_and_the_gate_dead_lettered_goes_back_wrapped(
    client: BankClient, shared_fleet: Fleet
) -> None:
    """The door accepted it (its identity is in the seen set), then its signer was removed before
    the gate judged it: the gate's letter is replayed inside the wrapper, once the signer is back."""
    principal, signer = unregistered(client)
    client.add_signer(principal, (events.CREATE,))
    task = f"t-{uuid.uuid4().hex[:12]}"
    event = create(signer, task)
    shared_fleet.stop_role("gate")
    try:
        client.publisher.publish(event)
        assert wait_until(lambda: bool(client.admin.exists(keys.seen(event.key_id, event.event_id))), 30)
        client.authority.remove_signer(event.key_id)
    finally:
        shared_fleet.start_role("gate")
    letter = letter_of(task, source="gate")
    assert "signature does not verify" in letter["reason"] and letter["replayable"] == "event"
    client.add_signer(principal, (events.CREATE,))

    done = replay(letter["id"], "--json")
    assert done.returncode == 0, done.stderr
    assert doc(done)["action"] == "wrapped"
    assert client.wait_settled(task, SETTLE_S)["stage"] == "closed"
    assert client.receipt(event.event_id, task, 10, key_id=event.key_id)["status"] == "accepted"


def test_a_wrapper_from_a_principal_not_allowed_to_replay_is_refused_at_the_door(
    client: BankClient, shared_fleet: Fleet
) -> None:
    principal, signer = unregistered(client)
    task = f"t-{uuid.uuid4().hex[:12]}"
    stale = datetime.now(UTC) - timedelta(seconds=client.settings.event_max_age + 120)
    event = create(signer, task, issued_at=stale)
    client.add_signer(principal, (events.CREATE,))
    marks = topic_marks(client.settings.kafka_bootstrap, topics.DLQ)
    # The requester may create tasks, not vouch for stale events: its wrapper is refused.
    wrapper = replays.wrap(
        client.signer(REQUESTER), event, event.encode().decode(), "0:0", now=datetime.now(UTC)
    )
    client.publisher.publish(wrapper)
    found = wait_letter(
        client.settings.kafka_bootstrap, marks, lambda d: wrapper.event_id in d.get("raw", "")
    )
    assert found is not None
    assert f"may not send {events.REPLAY}" in found[0]["reason"]
    assert not client.admin.exists(keys.state(task))


def test_a_letter_forged_onto_the_topic_is_refused_with_its_reason_and_writes_nothing(
    client: BankClient, shared_fleet: Fleet
) -> None:
    task = f"t-{uuid.uuid4().hex[:12]}"
    genuine = sign_event(
        client.signer(REQUESTER), events.CREATE, {"amount": 10, "currency": "EUR"}, task_id=task
    )
    tampered = genuine.model_copy(update={"payload": {"amount": 900, "currency": "EUR"}})
    raw = tampered.encode()
    now = datetime.now(UTC)
    forged = forge_letter(
        client, DeadLetter(source="inbound", reason="unknown key id", task_id=task, raw=raw.decode(), at=now)
    )
    nowhere = forge_letter(
        client,
        DeadLetter(source="executor", reason="r", task_id="t-nowhere", raw=_proposal("t-nowhere"), at=now),
    )
    before = replays_kept(client)
    refused = replay(forged)
    assert refused.returncode != 0 and "signature does not verify" in refused.stderr
    woken = replay(nowhere)
    assert woken.returncode != 0 and "task t-nowhere does not exist" in woken.stderr
    assert replays_kept(client) == before
    assert not client.admin.exists(keys.state(task))
    shown = wakeful("dlq", "show", forged, "--json")
    assert doc(shown)["plan"]["action"] == "none" and "does not verify" in doc(shown)["plan"]["why"]


def test_a_runtime_messages_letter_wakes_its_task_for_the_gate_to_judge_afresh(
    client: BankClient, shared_fleet: Fleet
) -> None:
    """Nobody may forge a role's channel signature, so a proposal is never re-sent: its task is
    woken through the timer, and the gate judges it from its stored state (a closed task: nothing)."""
    task, _ = client.new_task(100)
    before = client.wait_settled(task, SETTLE_S)
    assert before["stage"] == "closed"
    letter = forge_letter(
        client,
        DeadLetter(
            source="executor",
            reason="stale proposal",
            task_id=task,
            raw=_proposal(task),
            at=datetime.now(UTC),
        ),
    )
    marks = topic_marks(client.settings.kafka_bootstrap, topics.WAKE)
    done = replay(letter, "--json")
    assert done.returncode == 0, done.stderr
    assert (doc(done)["action"], doc(done)["task"], doc(done)["event"]) == ("woke task", task, "")
    woke = wait_letter(
        client.settings.kafka_bootstrap,
        marks,
        lambda d: d.get("task_id") == task and d.get("payload", {}).get("reason") == "deadline",
    )
    assert woke is not None, "the timer never woke the task"
    after = client.show(task)
    assert (after["stage"], after["state_version"]) == ("closed", before["state_version"])


def test_bad_ids_and_missing_keys_are_refused_with_what_to_do(client: BankClient) -> None:
    before = replays_kept(client)
    for argv, said in [
        (("show", "seven"), "not a letter id: write <partition>:<offset>"),
        (("show", "999:0"), "has no partition 999"),
        (("show", "0:999999999"), "no letter 0:999999999"),
        (("replay", "0:0", "--by", "nobody-here"), "no signing key for 'nobody-here'"),
        (("replay", "0:0", "--by", "alice"), "may not replay dead letters"),
    ]:
        result = wakeful("dlq", *argv)
        assert result.returncode == 2, (argv, result.stdout)
        assert said in result.stderr, (argv, result.stderr)
    assert replays_kept(client) == before


def _proposal(task: str) -> str:
    envelope = Envelope(
        message_id=f"prop:{task}:1",
        task_id=task,
        task_version=1,
        kind="proposal",
        created_at=datetime.now(UTC),
        trace_id="x",
    )
    return envelope.encode().decode()
