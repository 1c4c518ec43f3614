"""The tenants' in-flight limits (D108) and the tools' calls per second (D109) in the authority
store, and the history of every change.

Operators write them as the admin Redis user (`wakeful authority limits ...`); every role reads
them with its Snapshot (authority/snapshot.py), and what they mean is workflow/limits.py's. A
change and its history record are written in one MULTI, WATCHed, as the schedules are
(authority/schedule_store.py). Being authority, they are in its sealed copy on wakeful.authority
and come back with `wakeful recover`.

A limit counts the tasks it admitted: while no limit is stored at all, nothing is counted, so the
first one set finds every tenant's flight set left from an earlier limit stale, and clears it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

import orjson
import redis

from wakeful.authority import switches
from wakeful.authority.kept import moved
from wakeful.core.errors import ConfigError, Contention
from wakeful.core.ids import TENANT_RE
from wakeful.state import fair, keys

SET, UNSET = "set", "unset"
DEFAULT_SCOPE = "default"  # every tenant with no limit of its own
TENANT_SCOPE = "tenant:"  # tenant:N, one tenant's own
TOOL_SCOPE = "tool:"  # tool:A:T, tool T of app A: its calls per second and calls at once
WORKFLOW_SCOPE = "workflow:"  # workflow:A:W, workflow W of app A: each tenant's tasks of it in flight
MAX_IN_FLIGHT = 1_000_000  # the most a record may say: more is no limit, which `unset` says
MAX_RATE = 100_000.0  # calls per second a record may say
MIN_RATE = 0.001  # about one call in 17 minutes: `wakeful tools disable` stops a tool
MAX_BURST = 100_000
T = TypeVar("T")


def scope_of(tenant: str) -> str:
    """The scope of `tenant`'s own limit."""
    return f"{TENANT_SCOPE}{tenant}"


def tool_scope(app: str, tool: str) -> str:
    """The scope of `tool` of `app`'s calls per second."""
    return f"{TOOL_SCOPE}{app}:{tool}"


def workflow_scope(app: str, workflow: str) -> str:
    """The scope of the limit on each tenant's tasks of `workflow` of `app` in flight (D112)."""
    return f"{WORKFLOW_SCOPE}{app}:{workflow}"


def is_tool(scope: str) -> bool:
    return scope.startswith(TOOL_SCOPE)


def is_workflow(scope: str) -> bool:
    return scope.startswith(WORKFLOW_SCOPE)


def checked_scope(scope: str) -> str:
    """`scope` if it names a limit's scope (`default`, `tenant:N`, `tool:A:T` or `workflow:A:W`,
    each name as a tenant's); ConfigError otherwise."""
    for prefix, option, what in ((TOOL_SCOPE, "--tool", "tool"), (WORKFLOW_SCOPE, "--workflow", "workflow")):
        if not scope.startswith(prefix):
            continue
        names = scope.removeprefix(prefix).split(":")
        if len(names) == 2 and all(TENANT_RE.fullmatch(n) for n in names):
            return scope
        raise ConfigError(option, f"{scope[:80]!r}: an app and a {what}, each matching {TENANT_RE.pattern}")
    tenant = scope.removeprefix(TENANT_SCOPE)
    if scope == DEFAULT_SCOPE or (scope.startswith(TENANT_SCOPE) and TENANT_RE.fullmatch(tenant)):
        return scope
    raise ConfigError("--tenant", f"{tenant[:60]!r} is not a tenant: it must match {TENANT_RE.pattern}")


def encode(max_in_flight: int, *, by: str, at: str, reason: str) -> str:
    """A record as the store keeps it; ConfigError for a number of slots out of range."""
    if isinstance(max_in_flight, bool) or not 1 <= max_in_flight <= MAX_IN_FLIGHT:
        raise ConfigError(
            "--max-in-flight",
            f"{max_in_flight!r}: a whole number from 1 to {MAX_IN_FLIGHT} (`wakeful freeze` stops a tenant)",
        )
    return orjson.dumps({"max_in_flight": max_in_flight, "by": by, "at": at, "reason": reason}).decode()


def encode_rate(
    calls_per_s: float | None,
    burst: int | None,
    *,
    max_in_flight: int | None = None,
    by: str,
    at: str,
    reason: str,
) -> str:
    """A tool's record as the store keeps it: its calls a second and burst, its calls at once, or
    both; ConfigError for neither, or a number out of range."""
    if calls_per_s is None and max_in_flight is None:
        raise ConfigError("--calls-per-s", "a tool's limit is --calls-per-s R, --max-in-flight N, or both")
    doc: dict[str, Any] = {}
    if calls_per_s is not None:
        if isinstance(calls_per_s, bool) or not MIN_RATE <= calls_per_s <= MAX_RATE:
            raise ConfigError(
                "--calls-per-s",
                f"{calls_per_s!r}: from {MIN_RATE} to {MAX_RATE:g} (`wakeful tools disable` stops a tool)",
            )
        if burst is None or isinstance(burst, bool) or not 1 <= burst <= MAX_BURST:
            raise ConfigError("--burst", f"{burst!r}: a whole number from 1 to {MAX_BURST}")
        doc.update(calls_per_s=calls_per_s, burst=burst)
    if max_in_flight is not None:
        if isinstance(max_in_flight, bool) or not 1 <= max_in_flight <= MAX_IN_FLIGHT:
            raise ConfigError(
                "--max-in-flight",
                f"{max_in_flight!r}: a whole number from 1 to {MAX_IN_FLIGHT} (`tools disable` stops a tool)",
            )
        doc["max_in_flight"] = max_in_flight
    return orjson.dumps({**doc, "by": by, "at": at, "reason": reason}).decode()


def read(raw: str | bytes) -> dict[str, Any] | str:
    """A stored record as a JSON object, or why it does not read as one (workflow/limits.py and
    workflow/rates.py then hold what it limits to their damaged values)."""
    try:
        doc: Any = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return f"not JSON: {str(exc)[:80]}"
    return doc if isinstance(doc, dict) else "not a JSON object"


def counting(stored: Mapping[str, object] | Mapping[bytes, object]) -> bool:
    """Whether some in-flight limit is stored (a tool's rate is not one): only then do the roles
    count a tenant's tasks."""
    return any(not is_tool(k.decode() if isinstance(k, bytes) else k) for k in stored)


class LimitStore:
    def __init__(
        self, client: redis.Redis, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self.client = client
        self.clock = clock

    def set(self, scope: str, max_in_flight: int, *, by: str, reason: str = "") -> str | None:
        """Hold `scope` to `max_in_flight` tasks in flight, from the roles' next wake on. Returns
        the record it replaced, if any."""
        scope = checked_scope(scope)
        if is_tool(scope):
            raise ConfigError("--tool", "a tool's limit is in calls: set it with set_rate")
        by, reason = switches.checked_words(by, reason, reason_needed=False)
        doc = encode(max_in_flight, by=by, at=self._at(), reason=reason)
        return self._put(scope, doc, {"max_in_flight": str(max_in_flight), "by": by, "reason": reason})

    def set_rate(
        self,
        scope: str,
        calls_per_s: float | None,
        burst: int | None,
        *,
        max_in_flight: int | None = None,
        by: str,
        reason: str = "",
    ) -> str | None:
        """Hold a tool (scope `tool:A:T`) to `calls_per_s`, `burst` of them at once after a quiet
        spell, and to `max_in_flight` calls running at once (either or both), from the executors'
        next call on. The record replaces the tool's last whole. Returns the one it replaced, if any."""
        scope = checked_scope(scope)
        if not is_tool(scope):
            raise ConfigError("--tool", f"{scope}: a tenant's limit is in tasks in flight: set it with set")
        by, reason = switches.checked_words(by, reason, reason_needed=False)
        doc = encode_rate(
            calls_per_s, burst, max_in_flight=max_in_flight, by=by, at=self._at(), reason=reason
        )
        said = {k: "" if v is None else f"{v:g}" for k, v in (("calls_per_s", calls_per_s), ("burst", burst))}
        said["max_in_flight"] = "" if max_in_flight is None else str(max_in_flight)
        return self._put(scope, doc, {**said, "by": by, "reason": reason})

    def _put(self, scope: str, doc: str, said: dict[str, str]) -> str | None:
        def write(pipe: Any) -> str | None:
            stored: dict[bytes, bytes] = pipe.hgetall(keys.AUTH_LIMITS)
            if not is_tool(scope) and not counting(stored):
                self._clear_counts()
            was = stored.get(scope.encode())
            pipe.multi()
            pipe.hset(keys.AUTH_LIMITS, scope, doc)
            self._record(pipe, scope=scope, action=SET, **said)
            return was.decode("utf-8", "replace") if was is not None else None

        return self._watched(write)

    def unset(self, scope: str, *, by: str, reason: str = "") -> str:
        """Lift `scope`'s limit (its held creates are let in at the timer's next looks). Returns
        the record it removed; ConfigError if there is none."""
        scope = checked_scope(scope)
        by, reason = switches.checked_words(by, reason, reason_needed=False)

        def write(pipe: Any) -> str:
            was = pipe.hget(keys.AUTH_LIMITS, scope)
            if not isinstance(was, bytes):
                option = "--tool" if is_tool(scope) else "--workflow" if is_workflow(scope) else "--tenant"
                raise ConfigError(option, f"no limit for {scope}; `wakeful authority limits list` shows them")
            pipe.multi()
            pipe.hdel(keys.AUTH_LIMITS, scope)
            self._record(pipe, scope=scope, action=UNSET, max_in_flight="", by=by, reason=reason)
            return was.decode("utf-8", "replace")

        return self._watched(write)

    def all(self) -> dict[str, str]:
        """Every record as stored, scope -> JSON (workflow/limits.parse reads one)."""
        stored: dict[bytes, bytes] = self.client.hgetall(keys.AUTH_LIMITS)  # type: ignore[assignment]
        return {k.decode(): v.decode("utf-8", "replace") for k, v in sorted(stored.items())}

    def now(self, scope: str) -> dict[str, int]:
        """What a scope holds now, where its keys say it: a tenant's tasks in flight and creates
        held (in its queues), a tool's calls running (slots not yet lapsed); nothing for the
        default's or a workflow's, which would take a SCAN of every tenant's."""
        if scope.startswith(TENANT_SCOPE):
            tenant = scope.removeprefix(TENANT_SCOPE)
            queues, _ = fair.lines(self.client, tenant)  # its own, and its workflows' with creates
            pipe = self.client.pipeline(transaction=False)
            pipe.zcard(keys.fair_flight(tenant))
            for line in queues:
                pipe.zcard(line.queue)
            in_flight, *held = pipe.execute()
            return {"in_flight": int(in_flight), "held": sum(int(n) for n in held)}
        if is_tool(scope):
            app, _, tool = scope.removeprefix(TOOL_SCOPE).partition(":")
            now_ms = int(self.clock().timestamp() * 1000)
            running: Any = self.client.zcount(keys.tool_slots(app, tool), now_ms, "+inf")
            return {"calls_running": int(running)}
        return {}

    def history(self, count: int = 50) -> list[dict[str, str]]:
        """The last `count` changes, oldest first."""
        page: Any = self.client.xrevrange(keys.AUTH_LIMIT_HISTORY, count=count)
        rows = [{"id": i.decode(), **{k.decode(): v.decode() for k, v in f.items()}} for i, f in page]
        return list(reversed(rows))

    def _clear_counts(self) -> None:
        """Every tenant's flight sets: with no limit stored, no role kept them (a task that ended
        meanwhile gave nothing back), so what they hold is stale. Each in its own slot."""
        for pattern in (keys.PATTERN_FAIR_FLIGHT, keys.PATTERN_FAIR_WFLIGHT):
            for name in list(self.client.scan_iter(match=pattern, count=1000)):
                self.client.delete(name)

    def _watched(self, step: Callable[[Any], T]) -> T:
        for _ in range(keys.CAS_RETRIES):
            with self.client.pipeline(transaction=True) as pipe:  # one slot: {limits}
                try:
                    pipe.watch(keys.AUTH_LIMITS)  # type: ignore[no-untyped-call]
                    result = step(pipe)
                    pipe.execute()
                    moved(self.client)
                    return result
                except redis.WatchError:
                    continue
        raise Contention(keys.AUTH_LIMITS, keys.CAS_RETRIES)

    def _at(self) -> str:
        return self.clock().isoformat(timespec="seconds").replace("+00:00", "Z")

    def _record(self, pipe: Any, **fields: str) -> None:
        """The change's history record (scope, action, max_in_flight or calls_per_s and burst,
        by, reason), and when."""
        pipe.xadd(keys.AUTH_LIMIT_HISTORY, {**fields, "at": self._at()})
