"""Per-step credentials on the real stack (D120): worker processes run credential_app, whose tools
declare `credential = "bank"`, so the executor's minter makes a bank user for each run. A run's
credential works for its step and is removed when the step ends; one revoked mid-call
(`wakeful authority credentials revoke`) or past its lifetime (WAKEFUL_CREDENTIAL_TTL_S) is refused
by the bank at once, and the step is settled later under a new one; one whose executor is killed
mid-call ends with its minter, and users a minter left half-made are removed when one starts. No
credential appears anywhere else: not in Redis, wakeful.log, the spans exported, the processes'
logs or the model's requests."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import orjson
import psutil
import pytest
import redis
from cli_run import wakeful
from model_server import Scripted, call, scripted_fleet, task_of, tool_messages

from wakeful.consumers.kafka.client import partition_of
from wakeful.core import topics
from wakeful.core.process import wait_until
from wakeful.devstack.model_server import Reply, Request
from wakeful.devstack.otlp_receiver import Receiver
from wakeful.operate import log_reader
from wakeful.operate.client import Client
from wakeful.schemas import events
from wakeful.state import keys, minted

APP = "credential_app:app"
DESK = "minting-desk"
TTL_S = 10
FIRST_RECEIPT_S = 120.0
SETTLE_S = 90.0
GONE_S = 10.0  # a step's credential is removed within this of its end (the minter's next pass)
pytestmark = pytest.mark.timeout(400)
HOLDS: dict[str, bool] = {}  # task -> whether its note step holds until the test lets it go


def next_step(request: Request) -> Reply:
    task_id = task_of(request)
    made = len(tool_messages(request.body))
    if made == 0:
        return call("peek_ledger", {"task_id": task_id})
    if made == 1:
        return call("note_ledger", {"task_id": task_id, "hold": HOLDS.get(task_id, False)})
    return call("finish", {"task_id": task_id})


PLANTED: list[str] = []  # minted users left behind before the fleet started


def plant(client: Client) -> list[str]:
    """What a minter killed half-way leaves: a user with a record and no due time, and a user no
    record names."""
    half, bare = f"wkc-{uuid.uuid4().hex[:24]}", f"wkc-{uuid.uuid4().hex[:24]}"
    for user in (half, bare):
        client.admin.acl_setuser(user, enabled=True, passwords=["+left-behind"], commands=["+ping"])
    client.admin.hset(keys.MINTED, half, orjson.dumps({"user": half, "task_id": "t-gone"}))
    return [half, bare]


def users(client: Client) -> set[str]:
    return {u.decode() if isinstance(u, bytes) else u for u in client.admin.acl_users()}


@dataclass
class Minting:
    scripted: Scripted
    receiver: Receiver
    folder: Path


@pytest.fixture(scope="module")
def minting(client: Client, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Minting]:
    folder = tmp_path_factory.mktemp("handed")
    receiver = Receiver().start()
    client.add_signer(DESK, (events.CREATE,))
    PLANTED.extend(plant(client))
    env = {
        "WAKEFUL_CREDENTIAL_TTL_S": str(TTL_S),
        "WAKEFUL_TEST_CREDENTIALS": str(folder),
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    try:
        with scripted_fleet(next_step, APP, **env) as scripted:
            yield Minting(scripted, receiver, folder)
    finally:
        receiver.stop()


def ask(client: Client, hold: bool) -> str:
    task_id = f"t-{uuid.uuid4().hex[:12]}"
    HOLDS[task_id] = hold
    event = client.send(DESK, events.CREATE, {"workflow": "peek", "topic": "notes"}, task_id=task_id)
    receipt = client.receipt(event.event_id, task_id, FIRST_RECEIPT_S, key_id=event.key_id)
    assert receipt["status"] == "accepted", receipt
    return task_id


def handed(minting: Minting, task_id: str) -> list[dict[str, Any]]:
    path = minting.folder / f"{task_id}.jsonl"
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def works(client: Client, made: dict[str, Any]) -> bool:
    """Whether the bank (the stack's Redis) takes this credential now."""
    try:
        url, user, password = client.settings.redis_url, made["user"], made["password"]
        with redis.Redis.from_url(url, username=user, password=password) as own:
            return bool(own.ping())
    except redis.AuthenticationError:
        return False


def refused(client: Client, made: dict[str, Any]) -> bool:
    """Whether the bank refuses this credential now, for a wait: a login the server closes at once
    (its user removed in that instant: ACL DELUSER closes the connections logged in as it) is no
    answer yet, and the wait asks again."""
    try:
        return not works(client, made)
    except redis.ConnectionError:
        return False


def held(minting: Minting, task_id: str) -> dict[str, Any]:
    """The credential of the note step that is now holding, once it holds."""
    marker = minting.folder / f"{task_id}.held"
    assert wait_until(marker.exists, FIRST_RECEIPT_S), "the note step never started"
    return [h for h in handed(minting, task_id) if h["tool"] == "note_ledger"][-1]


def holding(client: Client, minting: Minting) -> tuple[str, dict[str, Any]]:
    """A task whose note step holds, and that step's credential, which works while it holds."""
    task_id = ask(client, hold=True)
    first = held(minting, task_id)
    assert works(client, first)
    return task_id, first


def closes(client: Client, task_id: str) -> None:
    done = client.wait_settled(task_id, SETTLE_S)
    assert done["stage"] == "closed", done


def let_go(minting: Minting, task_id: str) -> None:
    (minting.folder / f"{task_id}.go").touch()


READ_BATCH = 1000  # keys read per round trip: a stack a whole run used holds tens of thousands


def stored(client: Client) -> bytes:
    """Every value the stack's Redis holds, read as the admin, key by key (a batch of keys to a
    round trip)."""
    admin, out, keys_seen = client.admin, bytearray(), list(client.admin.scan_iter(count=READ_BATCH))
    for start in range(0, len(keys_seen), READ_BATCH):
        batch = keys_seen[start : start + READ_BATCH]
        kinds = admin.pipeline(transaction=False)
        for key in batch:
            kinds.type(key)
        reads = admin.pipeline(transaction=False)
        for key, kind in zip(batch, kinds.execute(), strict=True):
            _read(reads, key, cast(bytes, kind).decode())
        for key, value in zip(batch, reads.execute(), strict=True):
            out += key + repr(value).encode()
    return bytes(out)


def _read(pipe: Any, key: bytes, kind: str) -> None:
    """Queue the read of one key's whole value on `pipe`; a kind with none here reads as b''."""
    if kind == "string":
        pipe.get(key)
    elif kind == "hash":
        pipe.hgetall(key)
    elif kind == "list":
        pipe.lrange(key, 0, -1)
    elif kind == "set":
        pipe.smembers(key)
    elif kind == "zset":
        pipe.zrange(key, 0, -1, withscores=True)
    elif kind == "stream":
        pipe.xrange(key)
    else:  # gone since the scan ("none"): an empty read keeps the batch's values in step
        pipe.echo(b"")


def logged(client: Client, task_id: str) -> bytes:
    """Every message of the task's partition of wakeful.log, headers and value."""
    where = lambda partitions: partition_of(task_id, partitions)  # noqa: E731
    out = bytearray()
    for msg in log_reader.partition_messages(client.settings, where, topics.LOG):
        out += repr(msg.headers()).encode() + (msg.value() or b"")
    return bytes(out)


def everywhere_else(client: Client, minting: Minting, task_id: str) -> dict[str, bytes]:
    asked = [orjson.dumps(r.body) + repr(r.headers).encode() for r in minting.scripted.script.requests]
    files = Path(minting.scripted.fleet.dir).rglob("*")
    process_logs = b"".join(p.read_bytes() for p in files if p.is_file())
    return {
        "redis": stored(client),
        "wakeful.log": logged(client, task_id),
        "spans": repr(minting.receiver.snapshot()).encode(),
        "model requests": b"".join(asked),
        "process logs": process_logs,
    }


def test_a_steps_credential_works_for_its_step_then_is_removed_and_is_in_no_store(
    client: Client, minting: Minting
) -> None:
    task_id = ask(client, hold=False)
    closes(client, task_id)
    given = handed(minting, task_id)
    assert [g["tool"] for g in given] == ["peek_ledger", "note_ledger"], given  # no lookup was needed
    assert len({g["user"] for g in given}) == 2  # one per step, never shared
    gone = wait_until(lambda: all(refused(client, g) for g in given), GONE_S)
    assert gone, "a credential outlived its step"
    assert minted.of(client.admin, task_id) == []
    assert wait_until(lambda: bool(minting.receiver.snapshot()), 30), "no span was exported"
    for where, found in everywhere_else(client, minting, task_id).items():
        for g in given:
            assert g["password"].encode() not in found, f"{g['tool']}'s credential is in {where}"


def test_a_revoked_credential_is_refused_at_once_and_its_step_is_settled_under_a_new_one(
    client: Client, minting: Minting
) -> None:
    task_id, first = holding(client, minting)
    listed = orjson.loads(wakeful("authority", "credentials", "list", "--task", task_id, "--json").stdout)
    assert first["user"] in {r["user"] for r in listed}, listed
    revoked = wakeful("authority", "credentials", "revoke", "--task", task_id, "--by", "ops-lead")
    assert revoked.returncode == 0, revoked.stderr
    assert not works(client, first), "a revoked credential still works"
    let_go(minting, task_id)
    closes(client, task_id)
    after = [h for h in handed(minting, task_id) if h["tool"].startswith("note_ledger")][1:]
    assert after and all(h["user"] != first["user"] for h in after), after  # looked up, or made again


def test_a_credential_whose_step_outlives_its_lifetime_is_refused_once_that_lifetime_is_past(
    client: Client, minting: Minting
) -> None:
    task_id, first = holding(client, minting)
    assert wait_until(lambda: refused(client, first), TTL_S + GONE_S), "it outlived its lifetime"
    assert time.time() * 1000 >= first["expires_ms"] - 1000, "it was removed before its lifetime was out"
    let_go(minting, task_id)
    closes(client, task_id)


def test_the_credentials_of_a_killed_executor_end_with_it_long_before_their_lifetime(
    client: Client, minting: Minting
) -> None:
    task_id, first = holding(client, minting)
    minting.scripted.fleet.kill("executor")  # SIGKILL, in the middle of the step's call
    assert wait_until(lambda: refused(client, first), TTL_S), "it outlived its executor"
    assert time.time() * 1000 < first["expires_ms"], "only its lifetime ended it, not its minter"
    minting.scripted.fleet.start_role("executor")
    closes(client, task_id)


def test_a_user_a_minter_left_half_made_or_unrecorded_is_removed_when_a_minter_starts(
    client: Client, minting: Minting
) -> None:
    assert PLANTED
    assert wait_until(lambda: not users(client) & set(PLANTED), FIRST_RECEIPT_S), users(client) & set(PLANTED)
    assert client.admin.hmget(keys.MINTED, PLANTED) == [None, None]


def the_minter(minting: Minting) -> psutil.Process:
    executor = psutil.Process(minting.scripted.fleet.procs["executor"].pid)
    found = [
        p for p in executor.children(recursive=True) if "wakeful.consumers.minter" in " ".join(p.cmdline())
    ]
    assert len(found) == 1, found
    return found[0]


def test_a_minter_killed_between_steps_is_started_again_and_what_it_left_ends_with_its_lifetime(
    client: Client, minting: Minting
) -> None:
    before = ask(client, hold=False)
    closes(client, before)
    killed = the_minter(minting)
    killed.kill()  # SIGKILL: it removes nothing; its executor lives on, and reaps it when it next mints
    assert wait_until(lambda: not killed.is_running() or killed.status() == psutil.STATUS_ZOMBIE, 10)
    task_id = ask(client, hold=False)
    closes(client, task_id)
    assert the_minter(minting).pid != killed.pid
    left = handed(minting, before)
    assert wait_until(lambda: all(refused(client, g) for g in left), TTL_S + GONE_S), (
        "it outlived its lifetime"
    )
    given = handed(minting, task_id)
    assert wait_until(lambda: all(refused(client, g) for g in given), GONE_S), (
        "a credential outlived its step"
    )
