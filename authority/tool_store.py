"""The tools in the authority store: each app's published catalog, the switches that turn a tool off,
and the history of every change (docs/decisions.md D57).

Operators write it, as the admin Redis user (`wakeful tools ...`; `authority init`, the demo and a
worker started with the admin credential publish the app's catalog); the executor reads the switches
live with the rest of its snapshot (authority/snapshot.py) before it writes a step's intent. A change
and its history record are written in one MULTI, WATCHed, so no switch moves unrecorded and two
operators cannot both think they flipped it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import UTC, datetime
from typing import Any, TypeVar

import orjson
import redis

from wakeful.authority import switches
from wakeful.authority.kept import moved
from wakeful.authority.switches import ToolSwitch
from wakeful.core.errors import ConfigError, Contention
from wakeful.state import keys

DISABLE, ENABLE, PUBLISH = "disable", "enable", "publish"
T = TypeVar("T")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class ToolStore:
    def __init__(self, client: redis.Redis, clock: Callable[[], str] = _now) -> None:
        self.client = client
        self.clock = clock

    # ---- the catalog (published on deploy) -----------------------------------------------------

    def publish(self, app: str, catalog: str, tools: list[dict[str, Any]], by: str) -> bool:
        """Publish `app`'s tool catalog (stamp and sdk.tools.published() entries). True if it
        changed what was published (and a history record says so); False if it was there already."""
        by, _ = switches.checked_words(by, "", reason_needed=False)
        wanted = {"catalog": catalog, "tools": tools}

        def write(pipe: Any) -> bool:
            raw = pipe.hget(keys.AUTH_TOOL_CATALOG, app)
            if isinstance(raw, bytes):
                had = orjson.loads(raw)
                if {"catalog": had.get("catalog"), "tools": had.get("tools")} == wanted:
                    return False
            at = self.clock()
            pipe.multi()
            pipe.hset(keys.AUTH_TOOL_CATALOG, app, orjson.dumps({**wanted, "published_at": at, "by": by}))
            self._record(pipe, app, "*", action=PUBLISH, by=by, reason=f"catalog {catalog}", at=at)
            return True

        return self._watched(keys.AUTH_TOOL_CATALOG, write)

    def catalog(self, app: str) -> dict[str, Any] | None:
        """What was published for `app`: {catalog, tools, published_at, by}; None if nothing was."""
        raw = self.client.hget(keys.AUTH_TOOL_CATALOG, app)
        return orjson.loads(raw) if isinstance(raw, bytes) else None

    # ---- the switches --------------------------------------------------------------------------

    def switches(self) -> dict[str, ToolSwitch]:
        return switches.switches_from(self.client.hgetall(keys.AUTH_TOOL_SWITCHES))

    def disable(
        self, app: str, tool: str, *, by: str, reason: str, known: Collection[str]
    ) -> ToolSwitch | None:
        """Turn `tool` of `app` off, from the next step any executor begins. Returns the new switch,
        or None when it was off already (the switch in force is kept: see switch())."""
        by, reason = switches.checked_words(by, reason, reason_needed=True)
        _known(app, tool, known)
        field = switches.field_of(app, tool)

        def write(pipe: Any) -> ToolSwitch | None:
            if pipe.hexists(keys.AUTH_TOOL_SWITCHES, field):
                return None
            switch = ToolSwitch(app, tool, by, self.clock(), reason)
            pipe.multi()
            pipe.hset(keys.AUTH_TOOL_SWITCHES, field, switches.encode(switch))
            self._record(pipe, app, tool, action=DISABLE, by=by, reason=reason, at=switch.at)
            return switch

        return self._watched(keys.AUTH_TOOL_SWITCHES, write)

    def enable(
        self, app: str, tool: str, *, by: str, reason: str, known: Collection[str]
    ) -> ToolSwitch | None:
        """Turn `tool` of `app` on again. Returns the switch it removed, or None when it was on."""
        by, reason = switches.checked_words(by, reason, reason_needed=False)
        _known(app, tool, known)
        field = switches.field_of(app, tool)

        def write(pipe: Any) -> ToolSwitch | None:
            had = switches.switches_from(pipe.hgetall(keys.AUTH_TOOL_SWITCHES)).get(field)
            if had is None:
                return None
            pipe.multi()
            pipe.hdel(keys.AUTH_TOOL_SWITCHES, field)
            self._record(pipe, app, tool, action=ENABLE, by=by, reason=reason, at=self.clock())
            return had

        return self._watched(keys.AUTH_TOOL_SWITCHES, write)

    def switch(self, app: str, tool: str) -> ToolSwitch | None:
        return switches.disabled(self.switches(), app, tool)

    # ---- the history ---------------------------------------------------------------------------

    def history(
        self, app: str | None = None, tool: str | None = None, count: int = 50
    ) -> list[dict[str, str]]:
        """The last `count` changes (of `app`; of `tool`, with the app's catalog publishes), oldest
        first."""
        rows: list[dict[str, str]] = []
        last = "+"
        while len(rows) < count:
            page: Any = self.client.xrevrange(keys.AUTH_TOOL_HISTORY, max=last, count=200)
            for entry_id, fields in page:
                row = {k.decode(): v.decode() for k, v in fields.items()}
                if (app is None or row.get("app") == app) and (
                    tool is None or row.get("tool") in (tool, "*")
                ):
                    rows.append({"id": entry_id.decode(), **row})
            if len(page) < 200:
                break
            last = f"({page[-1][0].decode()}"
        return list(reversed(rows[:count]))

    def _watched(self, key: str, step: Callable[[Any], T]) -> T:
        """`step(pipe)` reads `key` WATCHed, then queues its writes after pipe.multi() (or writes
        nothing); a lost race is read and decided again, a bounded number of times."""
        for _ in range(keys.CAS_RETRIES):
            with self.client.pipeline(transaction=True) as pipe:  # a cluster's too: one slot ({tools})
                try:
                    pipe.watch(key)  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
                    result = step(pipe)
                    if len(pipe):  # writes queued after MULTI (a cluster's pipeline says so no other way)
                        pipe.execute()
                        moved(self.client)  # after: the switches are in their own slot ({tools})
                    return result
                except redis.WatchError:
                    continue
        raise Contention(key, keys.CAS_RETRIES)

    def _record(self, pipe: Any, app: str, tool: str, **row: str) -> None:
        """One history record: action, by, reason and at."""
        pipe.xadd(keys.AUTH_TOOL_HISTORY, {"app": app, "tool": tool, **row})


def _known(app: str, tool: str, known: Collection[str]) -> None:
    """ConfigError naming the tools `app` has, unless `tool` is one of them."""
    if tool not in known:
        have = ", ".join(sorted(known)) or "none"
        raise ConfigError("NAME", f"app {app} has no tool {tool!r}; its tools: {have}")
