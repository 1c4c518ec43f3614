"""`wakeful dlq replay --code C --since T` on the real stack: every letter of one code written in a
window goes back through the single replay's path, each applied once; a second run replays none
again; a dry run sends and records nothing; bad input is refused with what to do.

Letters of one code are made as an outage makes them: creates signed long enough ago that the
door refuses each as `stale` (tests/test_dlq_cli.py covers the single replay).
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from cli_run import doc, wakeful
from helpers import BankClient, topic_marks

from wakeful.core import topics
from wakeful.core.process import wait_until
from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import REQUESTER
from wakeful.producers.keys import generate_signer
from wakeful.producers.signing import Ed25519Signer, sign_event
from wakeful.schemas import events
from wakeful.schemas.events import SignedEvent
from wakeful.state import keys

pytestmark = pytest.mark.timeout(300)

OPERATOR = "ops-oncall"  # the dev signer that may send event.replay (`authority init`)
LETTERS = 5
SETTLE_S = 60.0


def bulk(since: datetime, until: datetime, *more: str) -> Any:
    return wakeful(
        "dlq",
        "replay",
        "--code",
        "stale",
        "--since",
        since.isoformat(),
        "--until",
        until.isoformat(),
        "--by",
        OPERATOR,
        "--reason",
        "inbound was down",
        "--json",
        *more,
    )


def _listed() -> list[dict[str, Any]]:
    result = wakeful("dlq", "list", "--json", "--source", "inbound", "--limit", "1000")
    assert result.returncode == 0, result.stderr
    found: list[dict[str, Any]] = orjson.loads(result.stdout)
    return found


def letters_about(tasks: set[str]) -> dict[str, str]:
    """Task -> the id of its letter on wakeful.dlq, for each of `tasks` that has one."""
    return {d["task"]: d["id"] for d in _listed() if d["task"] in tasks}


def events_end(client: BankClient) -> int:
    return sum(tp.offset for tp in topic_marks(client.settings.kafka_bootstrap, topics.EVENTS))


def test_stale_letters_of_a_window_are_replayed_in_bulk_each_applied_once_and_never_twice(
    client: BankClient, shared_fleet: Fleet
) -> None:
    since = datetime.now(UTC)
    old = since - timedelta(seconds=client.settings.event_max_age + 120)
    sent: dict[str, SignedEvent] = {}
    for _ in range(LETTERS):
        task = f"t-{uuid.uuid4().hex[:12]}"
        sent[task] = sign_event(
            client.signer(REQUESTER),
            events.CREATE,
            {"amount": 120, "currency": "EUR"},
            task_id=task,
            issued_at=old,
        )
        client.publisher.publish(sent[task])
    found: dict[str, str] = {}

    def all_refused() -> bool:
        found.update(letters_about(set(sent)))
        return len(found) == LETTERS

    assert wait_until(all_refused, 60), f"only {len(found)} of {LETTERS} creates were dead-lettered"
    assert all(r["code"] == "stale" for r in _listed() if r["id"] in found.values())
    until = datetime.now(UTC) + timedelta(seconds=1)
    tasks = set(sent)  # the requester's tenant is the default one: its ids are the runtime's
    kept, end = int(client.admin.xlen(keys.DLQ_REPLAYS)), events_end(client)

    dry = bulk(since, until, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    said = doc(dry)
    assert (said["dry_run"], said["selected"], said["skipped"], said["failed"]) == (True, LETTERS, [], [])
    assert {r["letter"] for r in said["replayed"]} == set(found.values())
    assert {r["action"] for r in said["replayed"]} == {"wrapped"}  # past their max age: inside the wrapper
    # Nothing sent, nothing recorded, no task made.
    assert (int(client.admin.xlen(keys.DLQ_REPLAYS)), events_end(client)) == (kept, end)
    assert not any(client.admin.exists(keys.state(t)) for t in tasks)

    done = bulk(since, until)
    assert done.returncode == 0, done.stderr
    said = doc(done)
    assert (said["selected"], len(said["replayed"]), said["skipped"], said["failed"]) == (
        LETTERS,
        LETTERS,
        [],
        [],
    )
    assert {r["task"] for r in said["replayed"]} == set(tasks)
    assert int(client.admin.xlen(keys.DLQ_REPLAYS)) == kept + LETTERS
    for task, event in sent.items():
        assert client.wait_settled(task, SETTLE_S)["stage"] == "closed"
        assert client.receipt(event.event_id, task, 10, key_id=event.key_id)["status"] == "accepted"
        assert len(client.bank.entries(task)) == 1  # applied once: one refund

    again = bulk(since, until)
    assert again.returncode == 0, again.stderr  # every letter is done: replayed before
    said = doc(again)
    assert (said["selected"], said["replayed"], said["failed"]) == (LETTERS, [], [])
    assert all("replayed already" in s["why"] for s in said["skipped"])
    assert int(client.admin.xlen(keys.DLQ_REPLAYS)) == kept + LETTERS
    assert all(len(client.bank.entries(t)) == 1 for t in tasks)


def test_a_bulk_run_that_leaves_a_letter_exits_1_and_the_same_run_again_replays_only_what_is_left(
    client: BankClient, shared_fleet: Fleet
) -> None:
    since = datetime.now(UTC)
    principal, signer = unregistered(client)
    task = f"t-{uuid.uuid4().hex[:12]}"
    event = sign_event(signer, events.CREATE, {"amount": 120, "currency": "EUR"}, task_id=task)
    client.publisher.publish(event)
    assert wait_until(lambda: task in letters_about({task}), 60), "the door never refused the create"
    until = datetime.now(UTC) + timedelta(seconds=1)
    window = ("--code", "unknown_key", "--since", since.isoformat(), "--until", until.isoformat())

    early = wakeful("dlq", "replay", *window, "--by", OPERATOR, "--json")
    assert early.returncode == 1, early.stderr
    (skipped,) = doc(early)["skipped"]
    assert (skipped["done"], doc(early)["replayed"]) == ("no", [])
    assert "is not registered" in skipped["why"] and "run the same command again" in early.stderr

    client.add_signer(principal, (events.CREATE,))
    done = wakeful("dlq", "replay", *window, "--by", OPERATOR, "--json")
    assert done.returncode == 0, done.stderr
    assert [r["task"] for r in doc(done)["replayed"]] == [task]
    assert client.wait_settled(task, SETTLE_S)["stage"] == "closed"
    assert len(client.bank.entries(task)) == 1


def unregistered(client: BankClient) -> tuple[str, Ed25519Signer]:
    """A new upstream principal with a key in the keystore that no registry knows yet."""
    principal = f"svc-late-{uuid.uuid4().hex[:8]}"
    path = client.keystore() / f"{principal}.key"
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return principal, generate_signer(f"key-{principal}", path)


def test_a_bulk_replay_refuses_bad_input_with_what_to_do(client: BankClient) -> None:
    kept = int(client.admin.xlen(keys.DLQ_REPLAYS))
    long_ago = datetime(2001, 1, 1, tzinfo=UTC)
    by = ("--by", OPERATOR)
    refusals = [
        (("--code", "stal", "--since", "2001-01-01", *by), "'stal' is no letter code: use one of"),
        (("--code", "stale", "--since", "2001-01-02", "--until", "2001-01-01", *by), "is not before --until"),
        (
            ("--code", "stale", "--since", "2001-01-01", "--until", "2001-01-02", *by),
            "no letter of code stale",
        ),
        (("--code", "stale", "--since", "yesterday", *by), "'yesterday' is not a time"),
        (("--code", "stale", *by), "--code C --since T"),
        (("0:0", "--code", "stale", "--since", "2001-01-01", *by), "not both"),
        (
            ("--code", "stale", "--since", long_ago.isoformat(), "--by", "alice"),
            "may not replay dead letters",
        ),
    ]
    # Side by side: each is a process of its own that spends much of its time waiting on the broker.
    with ThreadPoolExecutor(len(refusals)) as commands:
        results = list(commands.map(lambda refusal: wakeful("dlq", "replay", *refusal[0]), refusals))
    for (argv, said), result in zip(refusals, results, strict=True):
        assert result.returncode == 2, (argv, result.stdout, result.stderr)
        assert said in result.stderr, (argv, result.stderr)
    assert int(client.admin.xlen(keys.DLQ_REPLAYS)) == kept
