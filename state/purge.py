"""The Redis side of `wakeful task purge`: finding finished tasks in the task index, deleting one
task's keys with its tombstone, and the shared keys that still name it (docs/retention.md, D73).

Which task goes is decided above (workflow/retention.py); here, each one is taken by one function
call in its own slot (TAKE), which checks again what the decision read: the task is still at the
state_version its summary has, holds no quarantine marker and no lease, and its outbox and memory
stream are drained (every record of it is on wakeful.log). Then it deletes every key of the task,
its receipts (one per outside event its inbox holds) and adds the tombstone to its outbox, which the
relay puts on the log. The admin calls it; the function may run while Redis is full (allow-oom):
a purge is what an operator runs then.

Outside the task's slot, in order: its summary in the task index (HDEL, ZREM), its tombstone outbox
once the relay drained it (`wk:purge:pending` remembers those still waiting, for the next run),
and, one SCAN each per run, the correlation ids and deadlines that name a purged task.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import redis

from wakeful.state import functions, keys
from wakeful.state.functions import Function

# KEYS[1..13] the task's keys (TASK_KEYS order: state, ctr, lease, fence, inbox, outbox, ops,
# quarantine, evidence, memory, held, spent, tokens); ARGV[1] the state_version the caller judged,
# ARGV[2] the tombstone's record id, ARGV[3] its JSON, ARGV[4] the prefix of the task's receipt keys,
# ARGV[5] "1" for a dry run (nothing written).
# returns: {"purged", keys deleted (or that would be)} or {why not, 0}: "gone" (no state), "moved"
# (another state_version), "quarantined", "leased", "unpublished" (records not yet on the log).
# Receipt keys are named from the inbox: the same slot, so a cluster runs it unchanged.
TAKE = Function(
    "purge_take",
    """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'gone', 0} end
local top = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
if #top == 0 or top[1][1] ~= ARGV[1] .. '-1' then return {'moved', 0} end
if redis.call('EXISTS', KEYS[8]) == 1 then return {'quarantined', 0} end
if redis.call('EXISTS', KEYS[3]) == 1 then return {'leased', 0} end
if redis.call('XLEN', KEYS[6]) > 0 or redis.call('XLEN', KEYS[10]) > 0 then return {'unpublished', 0} end
local doomed = {}
for i, k in ipairs(KEYS) do
  if i ~= 6 and redis.call('EXISTS', k) == 1 then doomed[#doomed + 1] = k end
end
for _, m in ipairs(redis.call('SMEMBERS', KEYS[5])) do
  if string.sub(m, 1, 3) == 'ev:' then
    local r = ARGV[4] .. string.sub(m, 4)
    if redis.call('EXISTS', r) == 1 then doomed[#doomed + 1] = r end
  end
end
if ARGV[5] == '1' then return {'purged', #doomed} end
for _, k in ipairs(doomed) do redis.call('DEL', k) end
redis.call('XADD', KEYS[6], '*', 'id', ARGV[2], 'r', ARGV[3], 'k', 'p')
return {'purged', #doomed}
""",
    ("allow-oom",),
)
# KEYS[1] a purged task's outbox, KEYS[2] its state. returns: 1 deleted (drained, and no task made
# again under the id since), 0 kept.
DROP_OUTBOX = Function(
    "purge_drop_outbox",
    """
if redis.call('XLEN', KEYS[1]) == 0 and redis.call('EXISTS', KEYS[2]) == 0 then
  return redis.call('DEL', KEYS[1])
end
return 0
""",
    ("allow-oom",),
)
FUNCTIONS = (TAKE, DROP_OUTBOX)
SCAN_COUNT = 1000


def task_keys(task_id: str) -> list[str]:
    """Every key of the task's slot a purge deletes, but its receipts (named from its inbox)."""
    makers = (
        keys.state, keys.ctr, keys.lease, keys.fence, keys.inbox, keys.outbox, keys.ops,
        keys.quarantine, keys.evidence, keys.task_memory, keys.held, keys.spent, keys.tokens,
    )  # fmt: skip
    return [make(task_id) for make in makers]


@dataclass(frozen=True)
class Listed:
    """One task of a tenant's stage set: its runtime id, and its summary (None: unreadable)."""

    tenant: str
    task_id: str
    summary: dict[str, Any] | None


def tenants(client: redis.Redis) -> Iterator[str]:
    """Every tenant with a task index."""
    for key in client.scan_iter(match=keys.PATTERN_INDEX_TASKS, count=SCAN_COUNT):
        name = key.decode()
        yield name[name.index("{") + 1 : name.rindex("}")]


def older(
    client: redis.Redis, tenant: str, stage: str, *, cutoff_ms: int, offset: int, count: int
) -> list[Listed]:
    """Up to `count` of tenant's tasks at `stage` whose last change is before cutoff_ms, oldest
    first, from position `offset`, with their summaries (two reads in one round trip)."""
    found: list[bytes] = client.zrangebyscore(  # type: ignore[assignment]
        keys.index_stage(tenant, stage), "-inf", f"({cutoff_ms}", start=offset, num=count
    )
    if not found:
        return []
    rows = client.hmget(keys.index_tasks(tenant), found)
    return [Listed(tenant, t.decode(), _parsed(raw)) for t, raw in zip(found, rows, strict=True)]


def take(
    client: redis.Redis, jobs: Sequence[tuple[str, int, bytes, str]], *, dry_run: bool
) -> list[tuple[str, int]]:
    """TAKE each (task id, state_version, tombstone JSON, tombstone record id), in one round trip:
    each task's (outcome, keys deleted)."""
    pipe = client.pipeline(transaction=False)
    for task_id, version, tomb, record_id in jobs:
        args: list[functions.Arg] = [
            version,
            record_id,
            tomb,
            keys.task_receipt_prefix(task_id),
            int(dry_run),
        ]
        pipe.execute_command(*functions.command(TAKE, task_keys(task_id), args))  # type: ignore[no-untyped-call]
    out = []
    for reply in pipe.execute(raise_on_error=False) if jobs else []:
        value = functions.reply(TAKE, reply)
        out.append((value[0].decode(), int(value[1])))
    return out


def unindex(client: redis.Redis, gone: Iterable[Listed]) -> None:
    """Take purged tasks out of their tenants' index, and remember their tombstone outboxes."""
    pipe = client.pipeline(transaction=False)
    for t in gone:
        summary = t.summary or {}
        pipe.hdel(keys.index_tasks(t.tenant), t.task_id)
        if isinstance(summary.get("stage"), str):
            pipe.zrem(keys.index_stage(t.tenant, summary["stage"]), t.task_id)
        for wait in summary.get("waits") or ():
            pipe.zrem(keys.index_wait(t.tenant, str(wait.get("wait_for"))), t.task_id)
        for name in searched(t.tenant, summary):
            pipe.zrem(name, t.task_id)
        pipe.sadd(keys.OUTBOX_DIRTY, t.task_id)  # the relay publishes the tombstone
        pipe.sadd(keys.PURGE_PENDING, t.task_id)
    if len(pipe):
        pipe.execute()


def searched(tenant: str, summary: dict[str, Any]) -> list[str]:
    """The search sets a summary's task is in (D107): the tenant's creation set, its workflow's,
    and each of its attribute values'. Names a summary holds that no key may carry are skipped."""
    names = [keys.index_created(tenant)]
    pairs = [("workflow", summary.get("workflow"))]
    attributes = summary.get("attributes")
    pairs += [(f"attr:{k}", v) for k, v in attributes.items()] if isinstance(attributes, dict) else []
    for field, value in pairs:
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                names.append(keys.index_by(tenant, field, value))
    return names


def drop_outboxes(client: redis.Redis) -> tuple[int, int]:
    """The purged tasks whose tombstone outboxes the relay has drained leave PURGE_PENDING, and
    any drained outbox still there is deleted (the relay deletes one it empties; an older relay
    left it) unless a task was made again under the id; returns (drained, still waiting)."""
    drained = waiting = 0
    for chunk in _chunks(client.sscan_iter(keys.PURGE_PENDING, count=SCAN_COUNT), 500):
        ids = [t.decode() for t in chunk]
        pipe = client.pipeline(transaction=False)
        for task_id in ids:
            pipe.xlen(keys.outbox(task_id))
        lengths = pipe.execute()
        done = [t for t, n in zip(ids, lengths, strict=True) if n == 0]
        waiting += len(ids) - len(done)
        pipe = client.pipeline(transaction=False)
        for task_id in done:
            pipe.execute_command(  # type: ignore[no-untyped-call]
                *functions.command(DROP_OUTBOX, [keys.outbox(task_id), keys.state(task_id)], [])
            )
        if done:
            for reply in pipe.execute(raise_on_error=False):
                functions.reply(DROP_OUTBOX, reply)  # raises on an error; 0 is the relay's DEL
            client.srem(keys.PURGE_PENDING, *done)
            drained += len(done)
    return drained, waiting


def forget_names(client: redis.Redis, purged: set[str], *, dry_run: bool) -> tuple[int, int]:
    """The correlation ids and deadlines that name a purged task: deleted (unless a dry run);
    returns how many of each. One SCAN of wk:corr:* and one of wk:deadlines."""
    corrs = 0
    for chunk in _chunks(client.scan_iter(match=keys.PATTERN_CORR, count=SCAN_COUNT), 500):
        pipe = client.pipeline(transaction=False)  # GETs, not MGET: on a cluster the keys cross slots
        for key in chunk:
            pipe.get(key)
        values = pipe.execute()
        doomed = [
            k
            for k, v in zip(chunk, values, strict=True)
            if isinstance(v, bytes) and keys.corr_target(v)[1] in purged
        ]
        corrs += len(doomed)
        if doomed and not dry_run:
            client.delete(*doomed)
    late = [
        m
        for m, _ in client.zscan_iter(keys.DEADLINES, count=SCAN_COUNT)
        if m.decode().partition("|")[0] in purged
    ]
    if late and not dry_run:
        client.zrem(keys.DEADLINES, *late)
    return corrs, len(late)


def _chunks(items: Iterable[bytes], size: int) -> Iterator[list[bytes]]:
    chunk: list[bytes] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _parsed(raw: Any) -> dict[str, Any] | None:
    try:
        doc = orjson.loads(raw) if isinstance(raw, bytes) else None
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None
