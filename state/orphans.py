"""Sorted sets of task ids whose members can outlive their tasks' keys: the in-flight limits'
flight sets (a task removed by hand, or a create refused at its replay: D112) and the held floors
(a held list purged: D115). Whoever keeps such a set drops the members whose key is gone; a member
with no task id's shape (planted) goes too. Each set is read in chunks, one EXISTS pipeline a chunk."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import redis

CHUNK = 500


def drop_missing(
    client: redis.Redis, pattern: str, key_of: Callable[[str], str], *, before: int | str = "+inf"
) -> int:
    """Remove, from every sorted set named by `pattern`, the members scored up to `before` whose
    `key_of(member)` does not exist. How many went."""
    dropped = 0
    for name in list(client.scan_iter(match=pattern, count=1000)):
        start = 0
        while True:
            found: Any = client.zrangebyscore(name, "-inf", before, start=start, num=CHUNK)
            gone = _missing(client, [t.decode("utf-8", "replace") for t in found], key_of)
            if gone:
                client.zrem(name, *gone)
                dropped += len(gone)
            if len(found) < CHUNK:
                break
            start += CHUNK - len(gone)
    return dropped


def _missing(client: redis.Redis, task_ids: Sequence[str], key_of: Callable[[str], str]) -> list[str]:
    """Those of `task_ids` whose key does not exist, or that name no task."""
    named: list[tuple[str, str]] = []
    for task_id in task_ids:
        try:
            named.append((task_id, key_of(task_id)))
        except ValueError:
            named.append((task_id, ""))
    keyed = [key for _, key in named if key]
    pipe = client.pipeline(transaction=False)
    for key in keyed:
        pipe.exists(key)
    there = iter(pipe.execute() if keyed else [])
    return [task_id for task_id, key in named if not key or not next(there)]
