"""Stored data that this build keeps in another form, moved once by the admin: at every `wakeful dev
up` and `admin acl --apply`, beside the function library and the users (a second run finds nothing).

- Token counts kept before the stream counters (D51): `wk:{T}:tokens` and
  `wk:tenant:<N>:tokens:<yyyymmdd>`, strings the proposer added to with INCRBY. Each count is added
  to its stream (`wk:{T}:spent`, `wk:tenant:<N>:spent` in that day's window), then the string is
  deleted, so a task asleep across the upgrade keeps what it spent and the proposer reads only the
  streams. A count that is not a number is kept where it is, and said.
- Evidence kept whole in its task (before D69): each document is stored once by its digest, and
  the task keeps the reference and an excerpt (state/evidence.py).
"""

from __future__ import annotations

from datetime import UTC, datetime

import redis

from wakeful.state import evidence, keys
from wakeful.state.budget import DAY_SPAN, Account, Counter, NotAdded, add_to


def run(admin: redis.Redis) -> list[str]:
    """Every upgrade, as the admin; what was moved or kept, a line each (nothing when nothing was)."""
    return token_counts(admin) + evidence_references(admin)


def evidence_references(admin: redis.Redis) -> list[str]:
    """Evidence kept whole in a task's hash (before D69) moved into a document stored once by its
    digest, the task keeping the reference and an excerpt (state/evidence.py), so that a forget
    by lineage finds every copy."""
    moved = 0
    now = datetime.now(UTC)
    for key in _scan(admin, keys.PATTERN_EVIDENCE):
        found: dict[bytes, bytes] = admin.hgetall(key)  # type: ignore[assignment]
        for name, value in found.items():
            text = value.decode("utf-8", "replace")
            if evidence.held(text)["ref"] is None:
                evidence.upgrade(admin, keys.task_of(key), name.decode(), text, now)
                moved += 1
    return [f"moved {moved} evidence documents kept in their tasks into references (D69)"] if moved else []


def token_counts(admin: redis.Redis) -> list[str]:
    said: list[str] = []
    moved = 0
    for key in _scan(admin, keys.PATTERN_TASK_TOKENS):
        moved += _move(admin, key, Counter(keys.spent(keys.task_of(key))), said)
    for key in _scan(admin, keys.PATTERN_TENANT_TOKENS):
        _, _, tenant, _, day = key.split(":")
        floor = Account("t", tenant, day).floor
        moved += _move(admin, key, Counter(keys.tenant_spent(tenant), floor, DAY_SPAN), said)
    if moved:
        said.insert(0, f"moved {moved} token counts into their stream counters (D51)")
    return said


def _scan(admin: redis.Redis, pattern: str) -> list[str]:
    return sorted(
        {k.decode() if isinstance(k, bytes) else k for k in admin.scan_iter(match=pattern, count=1000)}
    )


def _move(admin: redis.Redis, key: str, counter: Counter, said: list[str]) -> int:
    """Add what the legacy counter `key` holds to `counter`'s stream and delete it: 1 if moved. A
    stream that is full, or already in a later day (that day's count stands), takes nothing and
    loses nothing."""
    count = used(admin.get(key))
    if count is None:
        said.append(f"kept {key}: it does not hold a count of tokens")
        return 0
    for _, why in add_to(admin, [counter], count) if count else []:
        if why in (NotAdded.DAMAGED, NotAdded.LOST):
            said.append(f"kept {key}: {counter.key} {why.value} {count}")
            return 0
    admin.delete(key)
    return 1


def used(raw: bytes | str | None) -> int | None:
    """The tokens a counter from before the streams holds (0 when it does not exist), or None when
    it is not a count."""
    if raw is None:
        return 0
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    if not text.isascii() or not text.isdigit():
        return None
    return int(text)
