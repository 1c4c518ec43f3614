"""Search a tenant's task index (D107): by workflow, stage, the attributes its workflow declares,
and creation or last-change time, newest created first, page by page.

The relay keeps, beside each summary, the tenant's tasks by creation time in one set, and in one
set per workflow and per attribute value (state/index_lua.py). A search walks the narrowest of
those its query names (an attribute's, else the workflow's, else every task's), between its
creation bounds, and keeps the summaries that match the rest of the query and whose MAC verifies.
A page reads at most SCAN_BUDGET entries of the set, so a query that matches little costs bounded
work per page and says where to go on (`next`); a page may then hold fewer rows than asked for,
even none, and still have a next. The position is the last entry read, (creation ms, task id),
so a task created meanwhile never shifts a page.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis

from wakeful.schemas.search import Position, Query
from wakeful.state import keys
from wakeful.state.index import PAGE, Index, parsed

SCAN_BUDGET = 2000  # set entries one page reads at most
CHUNK = 200  # entries read per round trip


@dataclass(frozen=True)
class Page:
    tasks: list[dict[str, Any]]  # summaries, without their views (`wakeful task query` reads one)
    next: str | None  # the cursor of the next page; None: the search is done


def search(index: Index, tenant: str, query: Query, *, limit: int = PAGE, cursor: str | None = None) -> Page:
    """One page of tenant's tasks that match `query`, newest created first. ValueError for a bad
    cursor or limit."""
    if not 1 <= limit <= PAGE:
        raise ValueError(f"limit is 1 to {PAGE}")
    start = Position.parse(cursor) if cursor else None
    rows: list[dict[str, Any]] = []
    last: Position | None = None
    read = 0
    for chunk in _walk(index.client, walked(tenant, query), query, start):
        found = index.client.hmget(keys.index_tasks(tenant), [task for task, _ in chunk])
        for (task, ms), raw in zip(chunk, found, strict=True):
            read, last = read + 1, Position(ms, task)
            doc = index.vouched(tenant, parsed(raw))
            if doc is not None and query.matches(doc):
                rows.append({k: v for k, v in doc.items() if k != "views"})
            if len(rows) == limit or read >= SCAN_BUDGET:
                return Page(rows, last.text())
    return Page(rows, None)


def walked(tenant: str, query: Query) -> str:
    """The set a search walks: the narrowest the query names, all ordered by creation."""
    for name, value in sorted(query.attributes.items()):
        return keys.index_by(tenant, f"attr:{name}", value)
    if query.workflow is not None:
        return keys.index_by(tenant, "workflow", query.workflow)
    return keys.index_created(tenant)


def _walk(
    client: redis.Redis, name: str, query: Query, start: Position | None
) -> Iterator[list[tuple[str, int]]]:
    """The set's entries from `start` (after it) down to the query's creation floor, newest first,
    a chunk per round trip."""
    top: int | str = "+inf"
    if query.created_before is not None:
        top = f"({_ms(query.created_before)}"
    if start is not None:
        top = start.ms  # a cursor is always below the query's own bound
    floor: int | str = _ms(query.created_after) if query.created_after is not None else "-inf"
    offset = 0
    while True:
        got: list[tuple[bytes, float]] = client.zrange(  # type: ignore[assignment]
            name, top, floor, byscore=True, desc=True, offset=offset, num=CHUNK, withscores=True
        )
        chunk = [(m.decode(), int(s)) for m, s in got]
        if start is not None:  # the entries at the cursor's own time that its page already read
            chunk = [(t, ms) for t, ms in chunk if ms != start.ms or t < start.task_id]
        if chunk:
            yield chunk
        if len(got) < CHUNK:
            return
        offset += CHUNK


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


@dataclass(frozen=True)
class Viewed:
    task_id: str  # as its tenant names it
    view: str
    value: dict[str, Any] | None  # None: the task has no view of that name (`known` says which it has)
    known: tuple[str, ...]
    state_version: int  # the change the view was computed at
    updated_at: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "view": self.view,
            "value": self.value,
            "state_version": self.state_version,
            "updated_at": self.updated_at,
        }


def view(index: Index, tenant: str, task_id: str, name: str) -> Viewed | None:
    """Tenant's task `task_id` (the runtime's id)'s view `name` as its last indexed change computed
    it, or None: no such task of the tenant's."""
    doc = index.task(tenant, task_id)
    if doc is None:
        return None
    views = doc.get("views")
    views = views if isinstance(views, dict) else {}
    value = views.get(name)
    return Viewed(
        str(doc.get("task_id", task_id)),
        name,
        value if isinstance(value, dict) else None,
        tuple(sorted(views)),
        int(doc.get("state_version", 0)),
        str(doc.get("updated_at", "")),
    )
