"""The task index on a real Redis (state/index.py): its function never moves a task back to an
older state_version (a record replayed, or planted, after a newer one changes nothing), moves a
task between a tenant's sets, refuses a record that files a task under another tenant, and only
the relay's credential may write it (the read door's may not)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
import redis

from wakeful.core.settings import Settings
from wakeful.schemas.logs import OutboxRecord, WaitSummary
from wakeful.state import acl, keys
from wakeful.state.index import Index

AT = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)

pytestmark = pytest.mark.timeout(60)


def record(task_id: str, version: int, stage: str, tenant: str, waits: bool = False) -> bytes:
    wait = WaitSummary(wait_for="approval", deadline=AT + timedelta(hours=1), correlation_id="corr-x")
    return OutboxRecord(
        record_id=f"{task_id}:{version}",
        task_id=task_id,
        state_version=version,
        message_id="m",
        stage=stage,
        task_version=1,
        at=AT + timedelta(seconds=version),
        tenant=tenant,
        workflow="refund",
        waits=(wait,) if waits else (),
    ).encode()


def members(admin: redis.Redis, key: str) -> list[str]:
    found: list[bytes] = admin.zrange(key, 0, -1)  # type: ignore[assignment]
    return [m.decode() for m in found]


def test_a_task_moves_forward_between_its_tenants_sets_and_never_back(settings: Settings) -> None:
    tenant = f"idx{uuid.uuid4().hex[:8]}"
    task_id = f"{tenant}.t-1"
    index, admin = Index(acl.connect(settings, "relay")), acl.connect(settings, "admin")
    assert index.apply([record(task_id, 2, "awaiting_approval", tenant, waits=True)]).applied == 1
    assert members(admin, keys.index_wait(tenant, "approval")) == [task_id]
    assert index.apply([record(task_id, 5, "closed", tenant)]).applied == 1
    replayed = index.apply([record(task_id, 2, "awaiting_approval", tenant, waits=True)])
    assert replayed.applied == 0 and replayed.skipped == []
    found: dict[str, Any] | None = index.task(tenant, task_id)
    assert found is not None and (found["stage"], found["state_version"]) == ("closed", 5)
    assert members(admin, keys.index_stage(tenant, "closed")) == [task_id]
    assert members(admin, keys.index_stage(tenant, "awaiting_approval")) == []
    assert members(admin, keys.index_wait(tenant, "approval")) == []


def test_a_record_filing_a_task_under_another_tenant_or_of_raw_bytes_is_skipped(settings: Settings) -> None:
    tenant = f"idx{uuid.uuid4().hex[:8]}"
    index = Index(acl.connect(settings, "relay"))
    applied = index.apply([record(f"other{tenant}.t-1", 3, "closed", tenant), b"\xff not json", b"[]"])
    assert applied.applied == 0 and len(applied.skipped) == 3
    assert index.task(tenant, f"other{tenant}.t-1") is None


def test_the_read_doors_credential_cannot_write_the_index(settings: Settings) -> None:
    door = acl.connect(settings, "ingress")
    with pytest.raises(redis.exceptions.NoPermissionError):
        door.hset(keys.index_tasks("default"), "t-1", orjson.dumps({"stage": "closed"}))
    with pytest.raises(redis.exceptions.NoPermissionError):
        Index(door).apply([record("t-1", 9, "closed", "default")])
