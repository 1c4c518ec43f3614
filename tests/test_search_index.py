"""Search and views on the task index (issue 48, item 5; D107), on a real Redis: the relay's login
applies log records through the index function, the read door's login and keys read them. A search
pages through every match once, newest created first, however many share a creation time; a task
whose attribute changes leaves its old value's set; a purged task leaves every set; nothing the
relay's login plants by hand in a search set is served."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import pytest

from wakeful.core import index_signing
from wakeful.core.settings import Settings
from wakeful.schemas.logs import OutboxRecord
from wakeful.schemas.search import Query
from wakeful.state import acl, keys, purge, search
from wakeful.state.index import Index

T0 = datetime(2030, 1, 1, tzinfo=UTC)
pytestmark = pytest.mark.timeout(60)


def record(tenant: str, n: int, version: int = 1, **fields: object) -> bytes:
    task_id = f"{tenant}.x{n}"
    made: dict[str, object] = {
        "stage": "ready" if n % 3 else "closed",
        "workflow": "refund" if n % 2 else "onboard",
        "created_at": T0 + timedelta(seconds=n // 2),  # two tasks share each creation time
        "views": {"progress": {"n": n, "version": version}},
        "attributes": {"currency": "EUR" if n % 5 else "USD"},
    }
    return OutboxRecord(
        record_id=f"{task_id}:{version}",
        task_id=task_id,
        state_version=version,
        message_id="m",
        task_version=1,
        at=T0 + timedelta(seconds=n, minutes=version),
        tenant=tenant,
        **{**made, **fields},  # type: ignore[arg-type]
    ).encode()


def relay(settings: Settings) -> Index:
    return Index(acl.connect(settings, "relay"), index_signing.load_signer(settings))


def door(settings: Settings) -> Index:
    return Index(acl.connect(settings, "ingress"), index_signing.load_keys(settings, "ingress"))


def every(index: Index, tenant: str, query: Query, limit: int) -> list[str]:
    seen, cursor = [], None
    while True:
        page = search.search(index, tenant, query, limit=limit, cursor=cursor)
        seen += [r["task_id"] for r in page.tasks]
        assert all("views" not in r for r in page.tasks)  # a row is a summary; a view is a query
        if (cursor := page.next) is None:
            return seen


def test_a_search_pages_through_every_match_once_newest_created_first(settings: Settings) -> None:
    tenant = f"s{os.urandom(3).hex()}"
    assert relay(settings).apply([record(tenant, n) for n in range(450)]).applied == 450
    found = every(door(settings), tenant, Query(workflow="refund", attributes={"currency": "EUR"}), limit=37)
    wanted = [n for n in range(450) if n % 2 and n % 5]
    assert len(found) == len(set(found)) == len(wanted)
    assert sorted(found) == sorted(f"x{n}" for n in wanted)
    assert [int(t[1:]) // 2 for t in found] == sorted((n // 2 for n in wanted), reverse=True)
    closed = every(
        door(settings), tenant, Query(stage="closed", created_after=T0 + timedelta(seconds=100)), 100
    )
    assert sorted(closed) == sorted(f"x{n}" for n in range(200, 450) if n % 3 == 0)
    changed = Query(updated_before=T0 + timedelta(minutes=1, seconds=10))
    assert sorted(every(door(settings), tenant, changed, 100)) == sorted(f"x{n}" for n in range(10))


def test_a_task_whose_attribute_changes_is_found_by_its_new_value_only(settings: Settings) -> None:
    tenant = f"s{os.urandom(3).hex()}"
    relay(settings).apply([record(tenant, 1)])
    relay(settings).apply([record(tenant, 1, version=2, attributes={"currency": "GBP"})])
    assert every(door(settings), tenant, Query(attributes={"currency": "EUR"}), 10) == []
    assert every(door(settings), tenant, Query(attributes={"currency": "GBP"}), 10) == ["x1"]
    relay(settings).apply([record(tenant, 1, version=3, attributes={"currency": "GBP"})])  # kept, not moved
    assert every(door(settings), tenant, Query(attributes={"currency": "GBP"}), 10) == ["x1"]
    shown = search.view(door(settings), tenant, f"{tenant}.x1", "progress")
    assert shown is not None and shown.value == {"n": 1, "version": 3} and shown.state_version == 3
    missing = search.view(door(settings), tenant, f"{tenant}.x1", "nothing")
    assert missing is not None and missing.value is None and missing.known == ("progress",)


def test_what_the_relays_login_plants_in_a_search_set_is_never_served(settings: Settings) -> None:
    tenant, other = f"s{os.urandom(3).hex()}", f"s{os.urandom(3).hex()}"
    relay(settings).apply([record(tenant, 1), record(other, 2)])
    by_hand = acl.connect(settings, "relay")
    eur = keys.index_by(tenant, "attr:currency", "EUR")
    by_hand.zadd(eur, {f"{other}.x2": 9e12, f"{tenant}.ghost": 9e12})  # another tenant's, and none
    by_hand.hset(keys.index_tasks(tenant), f"{tenant}.ghost", b'{"task_id":"ghost","stage":"ready"}')
    assert every(door(settings), tenant, Query(attributes={"currency": "EUR"}), 10) == ["x1"]


def test_a_purged_task_leaves_every_search_set(settings: Settings) -> None:
    tenant = f"s{os.urandom(3).hex()}"
    relay(settings).apply([record(tenant, 1)])
    admin = acl.connect(settings, "admin")
    summary = door(settings).task(tenant, f"{tenant}.x1")
    assert summary is not None
    purge.unindex(admin, [purge.Listed(tenant, f"{tenant}.x1", summary)])
    for name in purge.searched(tenant, summary):
        assert admin.zscore(name, f"{tenant}.x1") is None, name
    assert every(door(settings), tenant, Query(), 10) == []
    admin.srem(keys.PURGE_PENDING, f"{tenant}.x1")
    admin.srem(keys.OUTBOX_DIRTY, f"{tenant}.x1")


def test_a_task_made_before_creation_times_were_kept_is_dated_by_the_first_change_indexed(
    settings: Settings,
) -> None:
    tenant = f"s{os.urandom(3).hex()}"
    relay(settings).apply([record(tenant, 4, created_at=None)])  # its first change seen: T0 + 4s + 1 min
    relay(settings).apply([record(tenant, 4, version=2, created_at=None)])  # a later one moves nothing
    first = T0 + timedelta(seconds=4, minutes=1)
    assert (
        acl.connect(settings, "admin").zscore(keys.index_created(tenant), f"{tenant}.x4")
        == first.timestamp() * 1000
    )
    assert every(door(settings), tenant, Query(created_after=first), 10) == ["x4"]
    assert every(door(settings), tenant, Query(created_before=first), 10) == []
