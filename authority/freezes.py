"""The kill path's switches, as one wake reads them: which freeze, if any, holds a task.

A freeze names a scope: `all` (the fleet), `app:<name>`, `tenant:<name>` or `task:<id>`. An
operator throws it (`wakeful freeze`), it lives in the authority store, and every gate and executor
reads it live at each wake, so it holds wherever the task wakes. A frozen task takes no new step:
the gate keeps its wakes (held, not refused) and the executor writes no new intent; a step whose
intent was written before completes. `wakeful thaw` lifts the scope and the held wakes run, in order.

Pure: the store (authority/store.py) reads and writes the hash, the roles decide with `holding()`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from wakeful.core import ids
from wakeful.core.errors import ConfigError
from wakeful.state.replies import hash_reply

ALL = "all"
KINDS = ("task", "tenant", "app")  # a scope's kind, most specific first: the one a task is told of
_APP_NAME = r"[A-Za-z0-9_.-]{1,64}"
_NAMES = {"task": ids.TASK_ID, "tenant": ids.TENANT, "app": _APP_NAME}


@dataclass(frozen=True)
class Freeze:
    """One switch that holds a task: its scope, who threw it, why, when (as stored)."""

    scope: str
    by: str
    reason: str
    at: str

    def said(self) -> str:
        """The freeze in one line, for a receipt or a log."""
        return f"frozen ({self.scope}) by {self.by}: {self.reason}"


def scope(kind: str, name: str = "") -> str:
    """The scope a freeze names, checked: `all`, or `<kind>:<name>` with a well-formed name."""
    if kind == ALL:
        return ALL
    pattern = _NAMES.get(kind)
    if pattern is None:
        raise ConfigError("scope", f"{kind!r} is not one of all, {', '.join(KINDS)}")
    if not re.fullmatch(pattern, name):
        raise ConfigError(f"--{kind}", f"{name[:70]!r} is not a {kind} name ({pattern})")
    return f"{kind}:{name}"


def holding(frozen: Mapping[str, Freeze], app: str, tenant: str, task_id: str) -> Freeze | None:
    """The freeze that holds task `task_id` of `tenant` under `app`, or None: the most specific
    scope that names it (its own, its tenant's, its app's), else the fleet's."""
    for kind, name in (("task", task_id), ("tenant", tenant), ("app", app)):
        found = frozen.get(f"{kind}:{name}")
        if found is not None:
            return found
    return frozen.get(ALL)


def frozen_from(reply: Any) -> dict[str, Freeze]:
    """The freezes in force, from the stored hash (HGETALL's reply, parsed or raw). A record that
    does not read as one still freezes its scope: a switch is never lifted by damage to it."""
    found: dict[str, Freeze] = {}
    for raw_scope, raw in hash_reply(reply).items():
        name = raw_scope.decode("utf-8", "replace")
        doc = read_record(raw, "the switch's record is unreadable; it holds until thawed")
        found[name] = Freeze(name, doc["by"], doc["reason"], doc["at"])
    return found


def record(by: str, reason: str, at: str) -> bytes:
    """A freeze as stored: who threw it, why, when."""
    return checked_record(by, reason, at, why="the reason is recorded and shown to every held sender")


def checked_record(by: str, reason: str, at: str, *, why: str, **more: str) -> bytes:
    """An operator's act as stored (a freeze, a revocation): who, why and when, which must be said."""
    if not by.strip():
        raise ConfigError("--by", "say who acts; it is recorded")
    if not reason.strip():
        raise ConfigError("--reason", f"say why; {why}")
    return orjson.dumps({**more, "by": by, "reason": reason, "at": at})


def read_record(raw: bytes, unreadable: str) -> dict[str, str]:
    """A stored act's fields (by, reason, at, key) as text; one that does not read as a record
    still stands, with `unreadable` as its reason: damage never undoes an act."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict):
        doc = {"reason": unreadable}
    found = {f: str(doc.get(f, "")) for f in ("by", "reason", "at", "key")}
    return found | {"by": found["by"] or "?", "key": found["key"] or "?"}
