"""A frozen task's wakes: the gate keeps each one, in order, and replays them once it is thawed.

A freeze (authority/freezes.py) holds a task's wakes: the gate pushes the wake message as it came
(key, value, headers) onto the task's held list, marks the task in `wk:held`, and answers the
sender "held". Nothing is refused and nothing is lost: the wake's offset is stored only after the
push is durable, like any other outcome. `wakeful thaw` wakes every marked task (a deadline due
now, through the timer); at a task's next wake the gate replays its held wakes first, oldest first,
each exactly as a wake from Kafka is taken: its sender's signature (the role that judged it) and
the signed event inside verified again, and its inbox identity deduped, so a replay after a crash
applies nothing twice. A held list is Redis, not trust: a record that does not verify is taken
off the list and dead-lettered with its reason, its bytes whole (letter()). The one allowance is
age: a held wake may be days old and has no broker time of its own, so the bound a wake from Kafka
must meet against its append (gate_rules.misaddressed) is not asked of it (its event was fresh when
the door judged it).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from confluent_kafka import Message

from wakeful.consumers.kafka.failures import TRANSIENT_IO
from wakeful.core import topics
from wakeful.core.errors import Stopping
from wakeful.core.retry import Retry
from wakeful.state import keys
from wakeful.state.pinned import Command

REPLAYED, KEPT = "replayed", "kept"  # what a replay did: done with it (or dropped), or still frozen
HELD_MAX = 1000  # wakes one frozen task keeps; more are dead-lettered whole (full()), to replay later

Parts = tuple[bytes, bytes, list[tuple[str, bytes]]]  # a wake message's key, value and headers


class StillFrozen(Exception):
    """A held wake replayed while a freeze still holds its task: it stays where it is."""


@dataclass(frozen=True)
class Source:
    """Where a wake came from: Kafka (`parts`, the message as a freeze would keep it; `drained`:
    the task's held wakes were replayed first; `behind`: some are still held, so this one is held
    behind them, unjudged), or a held list (no parts)."""

    parts: Parts | None
    msg: Message | None = None  # the Kafka message (to dead-letter); None for a replay
    drained: bool = False
    behind: bool = False


def parts_of(msg: Message) -> Parts:
    found: list[Any] = list(msg.headers() or [])  # (name, value) pairs
    headers = [(str(h[0]), h[1] if isinstance(h[1], bytes) else str(h[1] or "").encode()) for h in found]
    return msg.key() or b"", msg.value() or b"", headers


def record(parts: Parts) -> bytes:
    """A wake message as the held list keeps it."""
    key, value, headers = parts
    return orjson.dumps(
        {
            "key": base64.b64encode(key).decode(),
            "value": base64.b64encode(value).decode(),
            "headers": [[k, base64.b64encode(v).decode()] for k, v in headers],
            "at": datetime.now(UTC).isoformat(),
        }
    )


def parts_from(raw: bytes) -> Parts | str:
    """The wake message a held record keeps, or why it is not one."""
    try:
        doc = orjson.loads(raw)
        headers = [(str(k), base64.b64decode(v, validate=True)) for k, v in doc["headers"]]
        return (
            base64.b64decode(doc["key"], validate=True),
            base64.b64decode(doc["value"], validate=True),
            headers,
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        return f"unreadable held wake: {type(exc).__name__}: {str(exc)[:80]}"


def full(task_id: str, held: int) -> str | None:
    """Why a frozen task keeps no more wakes (its held list is at HELD_MAX), or None. A flood of
    events to a frozen task must not fill Redis: the rest go to the dead letters, bytes whole."""
    if held < HELD_MAX:
        return None
    return (
        f"task {task_id} is frozen and already holds {held} wakes, the most a task keeps; "
        "replay this letter once the task is thawed"
    )


def hold_writes(task_id: str, held: bytes | None, read_at: tuple[int, int] | None = None) -> list[Command]:
    """Keep the wake on the task's held list (none for a deadline wake), and mark the task for the
    thaw to wake. A wake read from Kafka (`read_at`: its partition and offset) pins its partition's
    floor at its task's oldest held wake (D115): a Redis lost while it is held re-drives it."""
    kept: list[Command] = [("RPUSH", keys.held(task_id), held)] if held is not None else []
    if held is not None and read_at is not None:
        kept.append(("ZADD", keys.held_floor(read_at[0]), "NX", read_at[1], task_id))
    return [*kept, ("SADD", keys.HELD_TASKS, task_id)]


def pins(client: Any, partitions: Iterable[int]) -> dict[int, int]:
    """Per partition of wakeful.wake, the offset of its oldest held wake (none: nothing held). One
    round trip. A read that fails pins each partition at 0: a floor too low only adds work to a
    recovery, one too high would lose the held wakes."""
    wanted = sorted(set(partitions))
    try:
        pipe = client.pipeline(transaction=False)
        for partition in wanted:
            pipe.zrange(keys.held_floor(partition), 0, 0, withscores=True)
        found = pipe.execute()
    except Exception:
        return dict.fromkeys(wanted, 0)
    return {p: int(first[0][1]) for p, first in zip(wanted, found, strict=True) if first}


def unpin(client: Any, task_id: str, partition: int | None) -> None:
    """The task holds no wake any more: its partition's floor is free of it."""
    if partition is not None:
        client.zrem(keys.held_floor(partition), task_id)


def letter(parts: Parts) -> Message:
    """A held wake as the message it was, to dead-letter: its bytes whole, from no partition."""
    key, value, headers = parts
    return Message(topic=topics.WAKE, key=key, value=value, headers=[(k, v) for k, v in headers])


def drain(
    client: Any,
    task_id: str,
    replay: Callable[[Parts], str],
    dead: Callable[[Parts, str], object],
    log: Callable[..., None],
    *,
    partition: int | None = None,
) -> bool:
    """Replay the task's held wakes, oldest first, until none is left (True) or one is still
    frozen (False). A record is removed only after its replay is done: a crash in between replays
    it again, and the task's inbox makes that a duplicate. A record that cannot be replayed (it does
    not read as a wake, or judging it fails for good) is handed to `dead` with the reason (the
    record itself as the value where it does not read as a wake): it must not stand in front of the
    task's later wakes for ever. A transient failure (Retry) is raised, the record kept. Drained,
    the task no longer pins the floor of `partition` (the one its wakes are read from)."""
    name = keys.held(task_id)
    while True:
        raw = client.lindex(name, 0)
        if raw is None:
            client.srem(keys.HELD_TASKS, task_id)  # a hold after this marks the task again
            unpin(client, task_id, partition)
            return True
        parts = parts_from(raw)
        if isinstance(parts, str):
            dead((task_id.encode(), raw, []), parts)
        else:
            try:
                if replay(parts) == KEPT:
                    return False
            except (Retry, Stopping, *TRANSIENT_IO):
                raise
            except Exception as exc:  # the app's own code or a record no gate can judge
                dead(
                    parts,
                    f"held wake of {task_id} could not be judged: {type(exc).__name__}: {str(exc)[:200]}",
                )
        client.lrem(name, 1, raw)
        log("gate.held_replayed", task_id=task_id)
