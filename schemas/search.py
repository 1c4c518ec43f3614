"""A search of a tenant's tasks, as asked (D107): which workflow, stage and attribute values, and
between which creation and change times. The read door's parameters, the upstream client and the
CLI speak it; state/search.py answers it from the task index. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from wakeful.core import ids


@dataclass(frozen=True)
class Query:
    """What a search asks: every field given must hold (after: from then on; before: until then)."""

    workflow: str | None = None
    stage: str | None = None
    attributes: Mapping[str, str] = field(default_factory=dict)
    created_after: datetime | None = None
    created_before: datetime | None = None
    updated_after: datetime | None = None
    updated_before: datetime | None = None

    def __post_init__(self) -> None:
        if self.stage is not None:
            ids.checked(ids.NAME_RE, self.stage, "stage")
        for name in self.attributes:
            ids.checked(ids.NAME_RE, name, "attribute name")
        for after, before in (
            (self.created_after, self.created_before),
            (self.updated_after, self.updated_before),
        ):
            if after is not None and before is not None and after >= before:
                raise ValueError(f"nothing is after {after.isoformat()} and before {before.isoformat()}")

    def matches(self, summary: Mapping[str, Any]) -> bool:
        """Whether a (verified) summary is one the query asks for."""
        if self.workflow is not None and summary.get("workflow") != self.workflow:
            return False
        if self.stage is not None and summary.get("stage") != self.stage:
            return False
        held = summary.get("attributes")
        held = held if isinstance(held, Mapping) else {}
        if any(held.get(name) != value for name, value in self.attributes.items()):
            return False
        return _within(summary.get("updated_at"), self.updated_after, self.updated_before)


@dataclass(frozen=True)
class Position:
    """Where a page ended: the last set entry read, by (creation ms, task id), newest first."""

    ms: int
    task_id: str

    def text(self) -> str:
        return f"{self.ms}:{self.task_id}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """ValueError, saying what a cursor looks like, for anything else."""
        ms, sep, task_id = text.partition(":")
        if not sep or not ms.isdigit() or not ids.TASK_ID_RE.fullmatch(task_id):
            raise ValueError(f"{text[:80]!r} is not a search cursor (a page's `next`: <ms>:<task id>)")
        return cls(int(ms), task_id)


def _within(at: object, after: datetime | None, before: datetime | None) -> bool:
    if after is None and before is None:
        return True
    if not isinstance(at, str):
        return False
    try:
        when = datetime.fromisoformat(at)
    except ValueError:
        return False
    return (after is None or when >= after) and (before is None or when < before)


TIMES = ("created_after", "created_before", "updated_after", "updated_before")
ATTR = "attr."  # a query parameter attr.NAME=VALUE asks for an attribute's value


def to_params(query: Query) -> dict[str, str]:
    """The query as the read door's parameters (GET /v1/search)."""
    out = {k: v for k, v in (("workflow", query.workflow), ("stage", query.stage)) if v is not None}
    out |= {f"{ATTR}{name}": value for name, value in sorted(query.attributes.items())}
    out |= {k: t.isoformat() for k in TIMES if (t := getattr(query, k)) is not None}
    return out


def from_params(params: Mapping[str, str]) -> Query:
    """The query the read door's parameters ask (`limit` and `cursor` aside); ValueError saying
    what is wrong with any of them."""
    unknown = [
        k
        for k in params
        if k not in ("workflow", "stage", "limit", "cursor", *TIMES) and not k.startswith(ATTR)
    ]
    if unknown:
        raise ValueError(
            f"unknown search parameter {unknown[0][:40]!r}: use workflow, stage, attr.NAME, "
            f"{', '.join(TIMES)}, limit and cursor"
        )
    times = {k: _when(k, params[k]) for k in TIMES if k in params}
    attributes = {k.removeprefix(ATTR): v for k, v in params.items() if k.startswith(ATTR)}
    return Query(params.get("workflow"), params.get("stage"), attributes, **times)


def _when(name: str, text: str) -> datetime:
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        raise ValueError(
            f"{name} {text[:40]!r} is not a time with its zone (ISO 8601, e.g. 2026-12-06T09:00:00+00:00)"
        )
    return at
