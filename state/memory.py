"""The memory store: durable facts by tenant and subject, behind one write door.

    MemoryStore(relay).put(records)        the write door: only the relay calls it, with the
                                           records a change's outbox record carries
    MemoryStore(gate).recall(tenant, subjects)   the read door's read (workflow/memory.py filters)
    MemoryStore(admin).every() / .set_status() / .forget()   the operator's commands

Keys (state/keys.py's table): wk:mem:{N.D}:records, a hash of record id -> MemoryRecord JSON for
tenant N's subject with digest D; wk:mem:{N}:refused, a stream of refused candidates. A record is
written once and never overwritten by the door: replays of a change find it there. Only the admin
changes a status or deletes one, each change recorded in the record's history.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
import redis

from wakeful.core import ids
from wakeful.core.errors import DecodeError
from wakeful.schemas.memory import Change, MemoryRecord, Status, stamp
from wakeful.state import functions, keys, memory_seal
from wakeful.state.functions import Function
from wakeful.state.seal import Keyring

# KEYS[1] a subject's records hash, KEYS[2] its gone set (ids forgotten or dropped); ARGV[1] the
# record's id, ARGV[2] its JSON, ARGV[3] the most records a subject may hold, ARGV[4] now, ARGV[5]
# its status, ARGV[6] its task, ARGV[7] when it was written (times as schemas/memory.stamp writes
# them, so that their text compares as they do).
# returns: 1 written; 0 there already (a replay of the change that wrote it); -1 refused: the
# subject holds its most records, even after dropping what expired, was revoked or cannot be read
# (and, for an active record, the oldest quarantined one); -2 refused: another record holds its id;
# -3 refused: a record of this id was forgotten or dropped (a late replay never brings it back).
PUT = Function(
    "memory_put",
    """
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return -3 end
local held = redis.call('HGET', KEYS[1], ARGV[1])
if held then
  local ok, r = pcall(cjson.decode, held)
  if ok and type(r) == 'table' and r['task_id'] == ARGV[6] and r['created_at'] == ARGV[7] then return 0 end
  return -2
end
local most = tonumber(ARGV[3])
local count = redis.call('HLEN', KEYS[1])
if count >= most then
  local all = redis.call('HGETALL', KEYS[1])
  local oldest, oldest_at = nil, nil
  for i = 1, #all, 2 do
    local ok, r = pcall(cjson.decode, all[i + 1])
    if not ok or type(r) ~= 'table' or r['status'] == 'revoked' or type(r['expires_at']) ~= 'string'
        or r['expires_at'] <= ARGV[4] then
      redis.call('HDEL', KEYS[1], all[i])
      redis.call('SADD', KEYS[2], all[i])
      count = count - 1
    elseif r['status'] == 'quarantined' and type(r['created_at']) == 'string'
        and (oldest_at == nil or r['created_at'] < oldest_at) then
      oldest, oldest_at = all[i], r['created_at']
    end
  end
  if count >= most and ARGV[5] == 'active' and oldest then
    redis.call('HDEL', KEYS[1], oldest)
    redis.call('SADD', KEYS[2], oldest)
    count = count - 1
  end
  if count >= most then return -1 end
end
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
return 1
""",
)
_REFUSED = {
    -1: f"the subject holds its {keys.MEMORY_PER_SUBJECT} records",
    -2: "another record holds its id",
    -3: "a record of this id was forgotten or dropped: it is not written again",
}
FUNCTIONS = (PUT,)


@dataclass(frozen=True)
class Put:
    written: int
    refused: list[tuple[MemoryRecord, str]]  # each record the door refused, and why


class MemoryStore:
    def __init__(self, client: redis.Redis, keyring: Keyring | None = None) -> None:
        self.client = client
        self.keyring = keyring  # seals the status set_status sets (D93); None: left unsealed

    def put(self, records: Sequence[MemoryRecord], now: datetime) -> Put:
        """The write door: each record into its subject's hash unless it is there, or was
        forgotten; one round trip. A refusal (too big, the subject full, an id taken or gone)
        goes on the tenant's refused stream, and so does a reply that is an error for one record
        (the others are written). The library missing is raised (FunctionsMissing: a Retry)."""
        refused: list[tuple[MemoryRecord, str]] = []
        sent: list[MemoryRecord] = []
        pipe = self.client.pipeline(transaction=False)
        for record in records:
            raw = record.encode()
            if len(raw) > keys.MEMORY_RECORD_BYTES:
                refused.append(
                    (record, f"{len(raw)} bytes, past the {keys.MEMORY_RECORD_BYTES} a record may hold")
                )
                continue
            named = [
                keys.memory(record.tenant, record.subject),
                keys.memory_gone(record.tenant, record.subject),
            ]
            args: list[functions.Arg] = [record.id, raw, keys.MEMORY_PER_SUBJECT, stamp(now)]
            args += [record.status.value, record.task_id, stamp(record.created_at)]
            pipe.execute_command(*functions.command(PUT, named, args))  # type: ignore[no-untyped-call]
            sent.append(record)
        replies = pipe.execute(raise_on_error=False) if len(pipe) else []
        written = 0
        for record, reply in zip(sent, replies, strict=True):
            functions.raise_if_missing(PUT, reply)
            if isinstance(reply, redis.ResponseError):
                refused.append((record, f"the write door failed: {str(reply)[:200]}"))
            elif reply in _REFUSED:
                refused.append((record, _REFUSED[reply]))
            else:
                written += reply == 1
        self.refuse([(r.tenant, r.id, r.subject, r.fact, r.writer, why) for r, why in refused])
        return Put(written, refused)

    def candidates(self, task_ids: Sequence[str]) -> dict[str, list[tuple[bytes, bytes]]]:
        """The records each task's gate changes remembered, still to be written: (entry id, JSON)."""
        pipe = self.client.pipeline(transaction=False)
        for task_id in task_ids:
            pipe.xrange(keys.task_memory(task_id))
        return {
            task_id: [(e, f.get(b"r", b"")) for e, f in entries]
            for task_id, entries in zip(task_ids, pipe.execute(), strict=True)
        }

    def consumed(self, entries: dict[str, list[bytes]]) -> None:
        """Drop what the door has taken (written or refused) from the tasks' memory streams."""
        pipe = self.client.pipeline(transaction=False)
        for task_id, done in entries.items():
            if done:
                pipe.xdel(keys.task_memory(task_id), *done)
        if len(pipe):
            pipe.execute()

    def refuse(self, refusals: Iterable[tuple[str, str, str, str, str, str]]) -> None:
        """Record why candidates were not written: (tenant, id, subject, fact, writer, reason)."""
        pipe = self.client.pipeline(transaction=False)
        for named, rid, subject, fact, writer, reason in refusals:
            tenant = named if ids.TENANT_RE.fullmatch(named) else ids.DEFAULT_TENANT
            fields = {"id": rid, "subject": subject, "fact": fact, "writer": writer, "reason": reason}
            pipe.xadd(keys.memory_refused(tenant), fields, maxlen=keys.MEMORY_REFUSED_KEPT, approximate=True)  # type: ignore[arg-type]
        if len(pipe):
            pipe.execute()

    def recall(self, tenant: str, subjects: Sequence[str]) -> list[MemoryRecord]:
        """Every readable record of tenant's `subjects`. A field that does not decode, or is filed
        under another subject or tenant, is left out: a key in Redis is not trusted for being there."""
        return [
            r
            for subject, raws in self._subjects(tenant, subjects)
            for r in _decoded(raws)
            if r.tenant == tenant and r.subject == subject
        ]

    def recall_docs(self, tenant: str, subjects: Sequence[str]) -> list[Any]:
        """The records of tenant's `subjects` as stored, each parsed as JSON but not checked (the
        read door's filter decodes strictly what it may show: workflow/memory.shown_from)."""
        out: list[Any] = []
        for _, raws in self._subjects(tenant, subjects):
            for raw in raws:
                try:
                    out.append(orjson.loads(raw))
                except orjson.JSONDecodeError:
                    continue
        return out

    def _subjects(self, tenant: str, subjects: Sequence[str]) -> list[tuple[str, list[bytes]]]:
        """(subject, its records as stored) for each of tenant's `subjects`: one round trip (one
        per node on a cluster)."""
        if not subjects:
            return []
        pipe = self.client.pipeline(transaction=False)
        for subject in subjects:
            pipe.hgetall(keys.memory(tenant, subject))
        found = pipe.execute()
        return [(subject, list(held.values())) for subject, held in zip(subjects, found, strict=True)]

    def every(self) -> Iterator[MemoryRecord]:
        """Every readable record of every tenant (the operator's commands; a SCAN)."""
        for name in self.client.scan_iter(match=keys.PATTERN_MEMORY, count=1000):
            found: dict[bytes, bytes] = self.client.hgetall(name)  # type: ignore[assignment]
            yield from (
                r for r in _decoded(found.values()) if keys.memory(r.tenant, r.subject) == _text(name)
            )

    def set_status(
        self,
        record: MemoryRecord,
        status: Status,
        by: str,
        reason: str,
        now: datetime,
        *,
        only_from: frozenset[Status] = frozenset(Status),
    ) -> MemoryRecord | None:
        """Move one record to `status`, with who and why in its history, by compare-and-swap on its
        subject's hash, only from a status in `only_from` as the record stands when read under
        WATCH; None when it is gone (forgotten) or was moved meanwhile to a status not in it."""
        name = keys.memory(record.tenant, record.subject)
        with self.client.pipeline(transaction=True) as pipe:
            for _ in range(keys.CAS_RETRIES):
                try:
                    pipe.watch(name)  # type: ignore[no-untyped-call]
                    raw = pipe.hget(name, record.id)
                    if raw is None:
                        pipe.unwatch()
                        return None
                    current = MemoryRecord.decode(raw)  # type: ignore[arg-type]
                    if current.status not in only_from:
                        pipe.unwatch()
                        return None
                    change = Change(status=status, by=by, reason=reason, at=now)
                    updated = current.model_copy(
                        update={"status": status, "history": (*current.history, change)[-64:]}
                    )
                    # resealed by the operator's keyring; without one the change leaves it unsealed,
                    # and an unsealed record is never shown (a quarantine or a revoke needs no more)
                    updated = (
                        memory_seal.sealed(self.keyring, updated)
                        if self.keyring is not None
                        else updated.model_copy(update={"seal": None})
                    )
                    pipe.multi()
                    pipe.hset(name, record.id, updated.encode())
                    pipe.execute()
                    return updated
                except redis.WatchError:
                    continue
        raise redis.WatchError(f"memory record {record.id} kept changing under {keys.CAS_RETRIES} tries")

    def forgotten(
        self, source: str, by: str, ids: Sequence[str], evidence: Sequence[str], now: datetime
    ) -> None:
        """Keep a trace of a forget: the records are gone with their history, this stays."""
        doc = {
            "source": source,
            "by": by,
            "at": now.isoformat(),
            "memory": " ".join(ids),
            "evidence": " ".join(evidence),
        }
        self.client.xadd(keys.MEMORY_FORGOTTEN, doc, maxlen=keys.MEMORY_REFUSED_KEPT, approximate=True)  # type: ignore[arg-type]

    def delete(self, records: Iterable[MemoryRecord]) -> int:
        """Forget records: each deleted, and its id kept in its subject's gone set, so that a late
        replay of the change that wrote it never writes it again."""
        pipe = self.client.pipeline(transaction=False)
        count = 0
        for r in records:
            pipe.hdel(keys.memory(r.tenant, r.subject), r.id)
            pipe.sadd(keys.memory_gone(r.tenant, r.subject), r.id)
            count += 1
        return sum(pipe.execute()[0::2]) if count else 0


def derived(records: Sequence[MemoryRecord], source: str) -> list[MemoryRecord]:
    """The records that come from `source` (an event, an evidence digest, a record id): those whose
    provenance is it, and every record derived from one of them, transitively."""
    gone: set[str] = {source}
    out: dict[str, MemoryRecord] = {}
    grew = True
    while grew:
        grew = False
        for r in records:
            if r.id not in out and (r.lineage() & gone or r.id == source):
                out[r.id] = r
                gone.add(r.id)
                grew = True
    return list(out.values())


def _text(name: bytes | str) -> str:
    return name.decode() if isinstance(name, bytes) else name


def _decoded(raws: Iterable[bytes]) -> Iterator[MemoryRecord]:
    for raw in raws:
        try:
            yield MemoryRecord.decode(raw)
        except DecodeError:
            continue
