"""The task index against the relay's own Redis login (issue 46, item 4; D93), on a real Redis: what
that login puts into a tenant's index by hand (HSET of a summary, ZADD into a stage or wait set,
which Redis 7.0 cannot refuse a login that may call the index function) is never served by the read
door, which holds the ingress's copy of the relay's index key: not a task that does not exist, not
a closed task shown as waiting. Summaries a release before wrote unsigned are signed once by the
relay, and then served."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import orjson
import pytest

from wakeful.core import index_signing
from wakeful.core.settings import Settings
from wakeful.schemas.logs import OutboxRecord, WaitSummary
from wakeful.state import acl, keys
from wakeful.state.index import Index

AT = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)
pytestmark = pytest.mark.timeout(60)


def record(
    task_id: str, version: int, stage: str, tenant: str, waits: bool = False, *, at: datetime = AT
) -> bytes:
    wait = WaitSummary(wait_for="approval", deadline=AT + timedelta(hours=1), correlation_id="corr-x")
    return OutboxRecord(
        record_id=f"{task_id}:{version}",
        task_id=task_id,
        state_version=version,
        message_id="m",
        stage=stage,
        task_version=1,
        at=at + timedelta(seconds=version),
        tenant=tenant,
        workflow="refund",
        waits=(wait,) if waits else (),
    ).encode()


def door(settings: Settings) -> Index:
    """The index as the read door reads it: the ingress's login and its copy of the index keys."""
    return Index(acl.connect(settings, "ingress"), index_signing.load_keys(settings, "ingress"))


def test_what_the_relays_login_writes_into_the_index_by_hand_is_never_served(settings: Settings) -> None:
    tenant = f"n{uuid.uuid4().hex[:8]}"
    task = f"{tenant}.t-{uuid.uuid4().hex[:8]}"
    relay_login = acl.connect(settings, "relay")
    relay = Index(relay_login, index_signing.load_signer(settings))
    assert relay.apply([record(task, 1, "awaiting_approval", tenant, waits=True)]).applied == 1
    assert relay.apply([record(task, 2, "closed", tenant)]).applied == 1
    shown = door(settings).task(tenant, task)
    assert shown is not None and shown["stage"] == "closed" and "mac" not in shown

    # A task that does not exist, and the closed task rewritten as waiting (its real MAC kept).
    ghost = f"{tenant}.t-ghost0001"
    real = orjson.loads(relay_login.hget(keys.index_tasks(tenant), task))  # type: ignore[arg-type]
    waiting = {**real, "stage": "awaiting_approval", "state_version": 99}
    waiting["waits"] = [{"wait_for": "approval", "deadline": "2030-06-01T10:00:00Z", "correlation_id": "c"}]
    fake = {**waiting, "task_id": "t-ghost0001"}
    fake.pop("mac")
    relay_login.hset(keys.index_tasks(tenant), task, orjson.dumps(waiting))
    relay_login.hset(keys.index_tasks(tenant), ghost, orjson.dumps(fake))
    for name in (keys.index_stage(tenant, "awaiting_approval"), keys.index_wait(tenant, "approval")):
        relay_login.zadd(name, {task: 1, ghost: 1})

    read = door(settings)
    assert read.task(tenant, ghost) is None
    assert read.task(tenant, task) is None  # forged in place: not served (its next change mends it)
    assert read.listed(tenant, waiting="approval")[0] == []
    assert read.listed(tenant, stage="awaiting_approval")[0] == []

    # The task's next change mends it, though the forged summary claims a later version.
    relay.sign_unsigned()  # the relay's first sweep: the index of the release before is signed
    assert relay.apply([record(task, 3, "closed", tenant)]).applied == 1
    mended = door(settings).task(tenant, task)
    assert mended is not None and (mended["stage"], mended["state_version"]) == ("closed", 3)
    assert door(settings).listed(tenant, waiting="approval")[0] == []
    assert relay.apply([record(task, 3, "closed", tenant)]).applied == 0  # a replay stays refused


def test_summaries_of_the_release_before_are_signed_once_by_the_relay_and_then_served(
    settings: Settings,
) -> None:
    tenant = f"n{uuid.uuid4().hex[:8]}"
    task = f"{tenant}.t-{uuid.uuid4().hex[:8]}"
    admin = acl.connect(settings, "admin")
    relay_login = acl.connect(settings, "relay")
    Index(relay_login).apply(
        [record(task, 1, "awaiting_approval", tenant, waits=True)]
    )  # unsigned, as before
    assert door(settings).task(tenant, task) is None
    admin.delete(keys.INDEX_SIGNED)  # as on a Redis the release before kept
    relay = Index(relay_login, index_signing.load_signer(settings))
    assert relay.sign_unsigned() >= 1
    shown = door(settings).task(tenant, task)
    assert shown is not None and shown["stage"] == "awaiting_approval"
    # once per Redis: a summary planted unsigned after that is never signed by a later start
    relay_login.hset(
        keys.index_tasks(tenant), f"{tenant}.t-late0001", orjson.dumps({**shown, "task_id": "t-late0001"})
    )
    assert relay.sign_unsigned() == 0
    assert door(settings).task(tenant, f"{tenant}.t-late0001") is None


def test_the_ops_pages_stuck_list_shows_no_summary_the_relay_did_not_sign(settings: Settings) -> None:
    """The stuck list read the stage sets and summaries straight, with no MAC check: a summary
    planted with the relay's login, scored long ago, was listed with the fields it claimed."""
    from wakeful.operate.client import Client
    from wakeful.operate.ops.data import Reader
    from wakeful.operate.ops.sweep import Sweep

    tenant = f"n{uuid.uuid4().hex[:8]}"
    real, ghost = f"{tenant}.t-{uuid.uuid4().hex[:8]}", f"{tenant}.t-ghost0002"
    relay_login = acl.connect(settings, "relay")
    long_ago = datetime.now(UTC) - timedelta(days=1)
    signed = Index(relay_login, index_signing.load_signer(settings))
    assert signed.apply([record(real, 1, "ready", tenant, at=long_ago)]).applied == 1
    planted = orjson.loads(relay_login.hget(keys.index_tasks(tenant), real))  # type: ignore[arg-type]
    planted = {**planted, "task_id": "t-ghost0002"}
    planted.pop("mac")
    relay_login.hset(keys.index_tasks(tenant), ghost, orjson.dumps(planted))
    relay_login.zadd(keys.index_stage(tenant, "ready"), {ghost: 1})  # long ago: stuck, if it were real
    client = Client(settings)
    sweep = Sweep(client.admin)
    sweep.found = sweep.sweep()
    listed = {row["id"] for row in Reader(client, sweep).stuck() if row["tenant"] == tenant}
    assert ghost not in listed and real in listed, listed
