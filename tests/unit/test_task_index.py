"""The task index (state/index.py): what it keeps of a log record, and the keys a record may name."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from wakeful.schemas.logs import OutboxRecord, WaitSummary
from wakeful.state import index, keys
from wakeful.state.index_lua import APPLY

AT = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)


def record(**over: Any) -> bytes:
    doc = OutboxRecord(
        record_id="globex.t-1:4",
        task_id="globex.t-1",
        state_version=4,
        message_id="m",
        stage="awaiting_approval",
        task_version=2,
        at=AT,
        detail={"amount": 99},
        tenant="globex",
        workflow="refund",
        waits=(WaitSummary(wait_for="approval", deadline=AT + timedelta(hours=1), correlation_id="corr-1"),),
    ).model_dump(mode="json")
    return orjson.dumps(doc | over)


def test_the_index_keeps_a_tasks_place_and_waits_never_its_fields() -> None:
    kept = index.summary(orjson.loads(record()))
    assert kept == {
        "task_id": "t-1",  # as its tenant names it
        "workflow": "refund",
        "stage": "awaiting_approval",
        "task_version": 2,
        "state_version": 4,
        "updated_at": "2030-06-01T09:00:00Z",
        "waits": [{"wait_for": "approval", "deadline": "2030-06-01T10:00:00Z", "correlation_id": "corr-1"}],
        "created_at": None,  # a record that does not say (no views or attributes declared: none kept)
    }


def test_one_call_names_the_tenants_keys_and_each_wait_with_its_deadline() -> None:
    call = index.command(record())
    assert call[:3] == ("FCALL", APPLY.qualified, 5)
    assert call[3:8] == (
        "wk:index:{globex}:tasks",
        "wk:index:{globex}:stage:awaiting_approval",
        "wk:index:{globex}:created",
        keys.index_by("globex", "workflow", "refund"),
        "wk:index:{globex}:wait:approval",
    )
    ms = int(AT.timestamp() * 1000)
    # no creation time in the record (a task made before records said): "" lets the index keep the first
    assert call[8:10] == ("globex.t-1", 4) and call[11:] == (ms, "", 0, ms + 3_600_000)


def test_a_record_names_its_creation_and_each_attribute_values_set_by_creation_time() -> None:
    made = AT - timedelta(days=2)
    call = index.command(record(created_at=made.isoformat(), attributes={"currency": "EUR", "region": "n"}))
    assert call[2] == 7 and call[7:9] == (
        keys.index_by("globex", "attr:currency", "EUR"),
        keys.index_by("globex", "attr:region", "n"),
    )
    assert call[14:17] == (int(made.timestamp() * 1000), 2, int((AT + timedelta(hours=1)).timestamp() * 1000))
    kept = orjson.loads(call[12])
    assert kept["attributes"] == {"currency": "EUR", "region": "n"} and kept["created_at"] == made.isoformat()


@pytest.mark.parametrize("attributes", [{"Bad": "x"}, {"ok": 3}, ["currency"]])
def test_a_record_whose_attributes_cannot_name_a_set_is_refused(attributes: Any) -> None:
    with pytest.raises((ValueError, TypeError)):
        index.command(record(attributes=attributes))


def test_a_record_from_before_the_tenant_was_named_is_indexed_under_its_ids_namespace() -> None:
    assert index.tenant_of({"task_id": "globex.t-1"}) == "globex"
    assert index.tenant_of({"task_id": "t-1"}) == "default"
    assert index.tenant_of({"task_id": "a.b.t-1", "tenant": ""}) == "a.b"


@pytest.mark.parametrize(
    "over",
    [
        {"tenant": "glo{bex"},
        {"stage": "Awaiting:Approval"},
        {"task_id": "t-1}:x"},
        {"waits": [{"wait_for": "a b", "deadline": "2030-06-01T10:00:00Z", "correlation_id": "c"}]},
        {"state_version": "4"},
        {"at": "yesterday"},
        {"tenant": "initech"},  # globex.t-1 filed under another tenant
        {"tenant": "default"},
        {"task_id": "initech.t-1"},
    ],
)
def test_a_record_whose_parts_cannot_name_a_key_is_refused_before_any_call(over: dict[str, Any]) -> None:
    with pytest.raises((ValueError, KeyError, TypeError)):
        index.command(record(**over))


def test_a_bare_task_id_may_be_any_tenants_made_before_the_namespaces() -> None:
    assert index.command(record(task_id="t-1"))[8] == "t-1"  # after its five keys
