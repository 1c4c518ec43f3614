"""The gate's side of memory: the candidates a decision returned, made into records for the write
door on its change's outbox record, and the read door's records for a window.

A change's candidates ride in its outbox record's detail ("remember": the records, "forgot": why
any candidate was refused), written in the change's own transaction, so they are written exactly
when the change is; the relay puts them through the write door once the log holds them
(state/memory.py). The gate itself writes no memory: its Redis user may only read it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import redis

from wakeful.authority.signer_seal import SignerSeal
from wakeful.authority.snapshot import Snapshot, decode_signer
from wakeful.core.log import Log
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.events import SignedEvent
from wakeful.schemas.memory import MemoryRecord
from wakeful.schemas.signatures import VerifyKey
from wakeful.sdk.app import App
from wakeful.sdk.memory import Fact
from wakeful.state import keys, memory_seal
from wakeful.state.memory import MemoryStore
from wakeful.state.seal import Keyring
from wakeful.workflow import engine, memory

MAX_SUBJECTS = 4  # subjects one window recalls


def writer(event: SignedEvent | None, principal: str | None, text: object = None) -> memory.Writer:
    """Who writes what a decision on this event remembers: the event's verified signer (a deadline:
    the gate itself), and the event as the words' source. `text`: the event as the door received
    it (the wake's payload), which an active high-impact record carries for the read door."""
    if event is None or not principal:
        return memory.Writer("role:gate", "deadline")
    said = text if isinstance(text, str) else None
    return memory.Writer(f"principal:{principal}", f"event:{event.key_id}:{event.event_id}", said)


def admitted(
    app: App, ruling: object, who: memory.Writer, new: Checkpoint, now: datetime, *, keyring: Keyring
) -> tuple[list[MemoryRecord], list[str]]:
    """The records a change's decision remembered, each sealed (state/memory_seal.py), and why any
    candidate was refused. `new`: the task as the change writes it (its state_version names the
    records). Made once per try of the change's compare-and-swap (gate_writes.PerTry)."""
    if not isinstance(ruling, engine.Moved) or not ruling.remember:
        return [], []
    records, refused = memory.all_admitted(
        app.fact_table,
        [(who, ruling.remember, ruling.evidence)],
        tenant=new.security.tenant,
        task_id=new.task_id,
        state_version=new.state_version,
        now=now,
    )
    return [memory_seal.sealed(keyring, r) for r in records], refused


def detail(records: Sequence[MemoryRecord], refused: Sequence[str]) -> dict[str, Any]:
    """What the change's log record says of memory: the ids of the records it remembered (the
    relay's mark to read them from wk:{T}:memory) and why any candidate was refused."""
    return ({"memory": [r.id for r in records]} if records else {}) | (
        {"forgot": list(refused)} if refused else {}
    )


def writes(records: Sequence[MemoryRecord]) -> list[tuple[Any, ...]]:
    """The records, for the write door, in the change's own transaction: only the gate may add to
    a task's memory stream, so only a decision the gate judged can ask for an active record."""
    return [("XADD", keys.task_memory(r.task_id), "*", "r", r.encode()) for r in records]


class Recaller:
    """The read door for windows: the records a task's workflow recalls, as the window shows them.
    Only a record whose seal holds is shown, and an active high-impact one only with its verifier's
    signed event, checked against the signer as registered now (state/memory_seal.py); one that
    fails is left out, the next one of its fact may stand in, and the refusal is logged."""

    def __init__(
        self, client: redis.Redis, app: App, log: Log, keyring: Keyring, seal: SignerSeal | None = None
    ) -> None:
        self.store = MemoryStore(client)
        self.app = app
        self.log = log
        self.keyring = keyring
        self.seal = seal  # opens an HMAC verifier's secret (D91): without it no webhook-verified record shows

    def __call__(self, cp: Checkpoint, auth: Snapshot, now: datetime) -> list[dict[str, Any]]:
        """The window's memory layer; empty, and said, when it cannot be read: a record in Redis
        is not trusted for being there, and no record can keep a task from its next step."""
        try:
            return self._recalled(cp, auth, now)
        except (redis.ResponseError, ValueError, TypeError, KeyError) as exc:
            said = f"{type(exc).__name__}: {str(exc)[:200]}"
            self.log("gate.recall_failed", task_id=cp.task_id, reason=said)
            return []

    def _recalled(self, cp: Checkpoint, auth: Snapshot, now: datetime) -> list[dict[str, Any]]:
        wf = engine.workflow_of(self.app, cp)
        if wf.recall is None or "memory" not in wf.window:
            return []
        subjects = _subjects(wf.recall.subjects, engine.context(self.app, cp, auth, now))
        if isinstance(subjects, str):
            self.log("gate.recall_failed", task_id=cp.task_id, reason=subjects)
            return []
        found = self.store.recall_docs(cp.security.tenant, subjects)
        # (a kept workflow version may recall a fact the app no longer declares: not shown)
        facts = {name: self.app.fact_table[name] for name in wf.recall.facts if name in self.app.fact_table}
        refused: list[tuple[MemoryRecord, str]] = []
        kept = memory.shown_from(
            found,
            tenant=cp.security.tenant,
            subjects=subjects,
            facts=facts,
            now=now,
            check=Vouched(self.store.client, self.keyring, facts, self.seal),
            refused=refused,
        )
        for record, reason in refused:
            self.log("gate.memory_refused", task_id=cp.task_id, memory_id=record.id, reason=reason)
        return [memory.window_item(r) for r in kept]


class Vouched:
    """Why one record may not be shown (None: it may): its seal, and for an active high-impact
    record its verifier's event. Signers are read once per window, only when such a record is."""

    def __init__(
        self, client: redis.Redis, keyring: Keyring, facts: dict[str, Fact], seal: SignerSeal | None = None
    ) -> None:
        self.client = client
        self.keyring = keyring
        self.facts = facts
        self.seal = seal
        self.signers: dict[str, VerifyKey | None] = {}

    def __call__(self, record: MemoryRecord, doc: dict[str, Any] | None = None) -> str | None:
        said = memory_seal.seal_problem(self.keyring, record, doc)
        fact = self.facts.get(record.fact)
        if said or fact is None or not fact.high_impact:
            return said
        if record.verified_by not in fact.verifiers:
            return f"{record.verified_by} is not a verifier of {record.fact}"
        return memory_seal.event_problem(record, self._signer(memory_seal.event_key(record)))

    def _signer(self, key_id: str | None) -> VerifyKey | None:
        if key_id is None:
            return None
        if key_id not in self.signers:
            raw = self.client.hget(keys.AUTH_SIGNERS, key_id)
            try:
                found = decode_signer(key_id, raw, self.seal) if isinstance(raw, bytes) else None
                self.signers[key_id] = found[0] if found is not None else None
            except (ValueError, KeyError, TypeError):  # a damaged signer record vouches for nothing
                self.signers[key_id] = None
        return self.signers[key_id]


def _subjects(fn: Callable[[Any], Any], ctx: Any) -> list[str] | str:
    """The subjects a recall names for this task, or why it named none usable."""
    try:
        named = list(fn(ctx))
    except Exception as exc:  # an app's function: its failure costs only the memory layer
        return f"recall's subjects raised {type(exc).__name__}: {str(exc)[:200]}"
    usable = [s for s in named if isinstance(s, str) and memory.subject_ok(s)]
    if len(usable) != len(named):
        return f"recall named subjects that are not <kind>:<id>: {str(named)[:200]}"
    if len(usable) > MAX_SUBJECTS:
        return f"recall named {len(usable)} subjects, past the {MAX_SUBJECTS} a window reads"
    return usable
