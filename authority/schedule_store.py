"""The schedules in the authority store, and the history of every change to them (D104).

Operators write them as the admin Redis user (`wakeful schedule ...`, or Client.schedules); the
timer reads them and publishes their ticks (consumers/timer/schedules.py). A change and its history
record are written in one MULTI, WATCHed, as the tools' switches are (authority/tool_store.py). Being
authority, they are in its sealed copy on wakeful.authority and come back with `wakeful recover`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

import redis

from wakeful.authority import switches
from wakeful.authority.kept import moved
from wakeful.core.cron import CATCH_UP
from wakeful.core.errors import ConfigError, Contention, DecodeError
from wakeful.core.ids import DEFAULT_TENANT, TENANT_RE
from wakeful.schemas.schedule import ScheduleRecord
from wakeful.state import keys

ADD, PAUSE, RESUME, DELETE, RAN = "add", "pause", "resume", "delete", "ran"
T = TypeVar("T")


def claim(client: redis.Redis, name: str, tick: datetime, who: str, ttl_ms: int) -> bool:
    """Claim for `who` the run of `name`'s ticks that starts at `tick`, for `ttl_ms`: of every
    timer (or purge runner) that finds them due, one runs them; a dead one's claim lapses."""
    return bool(client.set(keys.schedule_claim(name, _ms(tick)), who, nx=True, px=ttl_ms))


def mark_fired(client: redis.Redis, name: str, tick: datetime) -> None:
    """`name`'s newest tick run is `tick`, unless a later one is marked: the mark never moves back."""
    client.zadd(keys.SCHEDULE_FIRED, {name: _ms(tick)}, gt=True)


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


class ScheduleStore:
    def __init__(
        self, client: redis.Redis, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self.client = client
        self.clock = clock

    def add(
        self,
        name: str,
        rule: str,
        workflow: str,
        payload: dict[str, Any],
        *,
        by: str,
        catch_up: str,
        tenant: str = DEFAULT_TENANT,
        job: Literal["create", "purge"] = "create",
    ) -> ScheduleRecord:
        """A new schedule of `tenant`'s tasks (or, `job` "purge", of the app's retention purge),
        ticking from now; ConfigError if the name is taken or a field is wrong."""
        by, _ = switches.checked_words(by, "", reason_needed=False)
        if catch_up not in CATCH_UP:
            raise ConfigError("--catch-up", f"{catch_up!r} is not one of {', '.join(CATCH_UP)}")
        if not keys.SCHEDULE_NAME.fullmatch(name):
            raise ConfigError("NAME", f"{name!r} must match {keys.SCHEDULE_NAME.pattern}")
        if not TENANT_RE.fullmatch(tenant):
            raise ConfigError(
                "--tenant", f"{tenant[:60]!r} is not a tenant: it must match {TENANT_RE.pattern}"
            )
        record = ScheduleRecord(
            name=name,
            rule=rule,
            workflow=workflow,
            payload=payload,
            catch_up=catch_up,
            by=by,
            since=self.clock(),
            tenant=tenant,
            job=job,
        )

        def write(pipe: Any) -> ScheduleRecord:
            if pipe.hexists(keys.AUTH_SCHEDULES, name):
                raise ConfigError("NAME", f"schedule {name} exists: delete it first, or choose another name")
            pipe.multi()
            pipe.hset(keys.AUTH_SCHEDULES, name, record.encode())
            said = f"{rule} -> {workflow}, catch-up {catch_up}" + (
                f", tenant {tenant}" if tenant != DEFAULT_TENANT else ""
            )
            self._record(pipe, name, ADD, by, said)
            return record

        return self._watched(write)

    def ran(self, name: str, by: str, said: str) -> None:
        """A purge schedule's run, in the history beside its changes: what it did, on whose word."""
        with self.client.pipeline(transaction=False) as pipe:
            self._record(pipe, name, RAN, by, said)
            pipe.execute()
        moved(self.client)

    def pause(self, name: str, *, by: str, reason: str = "") -> ScheduleRecord:
        """No tick is published while paused; those that fall in the pause are never owed."""
        paused = self._change(name, PAUSE, by, reason, lambda r: r.model_copy(update={"paused": True}))
        assert paused is not None
        return paused

    def resume(self, name: str, *, by: str, reason: str = "") -> ScheduleRecord:
        """Ticks again from now on: none that fell while it was paused."""
        now = self.clock()
        resumed = self._change(
            name, RESUME, by, reason, lambda r: r.model_copy(update={"paused": False, "since": now})
        )
        assert resumed is not None
        return resumed

    def delete(self, name: str, *, by: str, reason: str = "") -> str:
        """Remove the schedule (one that does not decode too), and then its newest published tick:
        one added later under the name ticks from its own since. Returns the name."""
        self._change(name, DELETE, by, reason, None)
        self.client.zrem(keys.SCHEDULE_FIRED, name)
        return name

    def all(self) -> dict[str, ScheduleRecord | str]:
        """Every schedule by name, or for one that does not decode, why not."""
        found: dict[str, ScheduleRecord | str] = {}
        stored: dict[bytes, bytes] = self.client.hgetall(keys.AUTH_SCHEDULES)  # type: ignore[assignment]
        for name, raw in stored.items():
            try:
                found[name.decode()] = ScheduleRecord.decode(raw)
            except DecodeError as exc:
                found[name.decode()] = f"unreadable: {exc}"
        return dict(sorted(found.items()))

    def fired(self) -> dict[str, datetime]:
        """Each schedule's newest tick published on wakeful.events."""
        rows: Any = self.client.zrange(keys.SCHEDULE_FIRED, 0, -1, withscores=True)
        return {n.decode(): datetime.fromtimestamp(ms / 1000, UTC) for n, ms in rows}

    def history(self, count: int = 50) -> list[dict[str, str]]:
        """The last `count` changes, oldest first."""
        page: Any = self.client.xrevrange(keys.AUTH_SCHEDULE_HISTORY, count=count)
        rows = [{"id": i.decode(), **{k.decode(): v.decode() for k, v in f.items()}} for i, f in page]
        return list(reversed(rows))

    def _change(
        self,
        name: str,
        action: str,
        by: str,
        reason: str,
        change: Callable[[ScheduleRecord], ScheduleRecord] | None,
    ) -> ScheduleRecord | None:
        by, reason = switches.checked_words(by, reason, reason_needed=False)

        def write(pipe: Any) -> ScheduleRecord | None:
            raw = pipe.hget(keys.AUTH_SCHEDULES, name)
            if not isinstance(raw, bytes):
                raise ConfigError("NAME", f"no schedule {name}; `wakeful schedule list` shows them")
            # A delete reads nothing of it: a record that does not decode can be deleted too.
            record = ScheduleRecord.decode(raw) if change is not None else None
            pipe.multi()
            if change is None or record is None:
                pipe.hdel(keys.AUTH_SCHEDULES, name)
            else:
                record = change(record)
                pipe.hset(keys.AUTH_SCHEDULES, name, record.encode())
            self._record(pipe, name, action, by, reason)
            return record

        return self._watched(write)

    def _watched(self, step: Callable[[Any], T]) -> T:
        for _ in range(keys.CAS_RETRIES):
            with self.client.pipeline(transaction=True) as pipe:  # one slot: {schedules}
                try:
                    pipe.watch(keys.AUTH_SCHEDULES)  # type: ignore[no-untyped-call]
                    result = step(pipe)
                    if len(pipe):
                        pipe.execute()
                        moved(self.client)
                    return result
                except redis.WatchError:
                    continue
        raise Contention(keys.AUTH_SCHEDULES, keys.CAS_RETRIES)

    def _record(self, pipe: Any, name: str, action: str, by: str, reason: str) -> None:
        at = self.clock().isoformat(timespec="seconds").replace("+00:00", "Z")
        pipe.xadd(
            keys.AUTH_SCHEDULE_HISTORY, {"name": name, "action": action, "by": by, "reason": reason, "at": at}
        )
