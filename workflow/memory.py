"""Memory's two doors as pure rules: what a decision's `Remember` candidates become (`admitted`),
and which stored records may reach a window (`shown`). state/memory.py keeps the records; the gate
and the executor put candidates on their change's outbox record, and the relay writes them.

The write door: every candidate gets a writer (the principal whose signed event was judged, or the
role whose own work it was), a provenance (that event, the evidence document it was read from by
content digest, or the tool answer by op key), its tenant and subject, its fact's expiry, and a
status: quarantined, unless its writer is one of the fact's verifiers, and for a high-impact fact
only when the words are the verifier's own event, never a document.

The read door: active, unexpired records of the facts a workflow recalls, about the subjects it
names, of the task's own tenant; of a fact kept `one` per subject, the newest only. Each is shown
as data with its provenance, never as an instruction.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from pydantic import ValidationError

from wakeful.core.errors import DecodeError
from wakeful.schemas.base import cut, first_errors
from wakeful.schemas.memory import FACT, SUBJECT, VALUE_CHARS, Change, MemoryRecord, Status, evidence_ref
from wakeful.sdk.memory import Fact, Remember

MAX_PER_CHANGE = 8  # candidates one decision may return
MAX_SHOWN = 8  # records one window shows
_SUBJECT, _FACT = re.compile(SUBJECT), re.compile(FACT)


@dataclass(frozen=True)
class Writer:
    """Who writes a change's candidates, and where their words came from when no document is named."""

    name: str  # "principal:<signer>" or "role:<role>"
    source: str  # "event:<key id>:<event id>", "op:<op key>" or "deadline"
    event: str | None = None  # the signed event's text as the door received it (source "event:...")


def subject_ok(subject: str) -> bool:
    return bool(_SUBJECT.fullmatch(subject))


def record_id(task_id: str, state_version: int, index: int) -> str:
    """The id of a change's index-th candidate: the same on every replay of the change."""
    return "m-" + hashlib.sha256(f"{task_id}:{state_version}:{index}".encode()).hexdigest()[:24]


def admitted(
    facts: Mapping[str, Fact],
    candidates: Sequence[Remember],
    *,
    writer: Writer,
    tenant: str,
    task_id: str,
    state_version: int,
    evidence: Mapping[str, str],
    now: datetime,
    first: int = 0,
) -> tuple[list[MemoryRecord], list[str]]:
    """The records a change's candidates become, and why any was refused (it is not written).
    `first`: the number of the change's first candidate here, when its candidates come in groups
    of different writers (a turn of several calls), so that each keeps an id of its own."""
    records: list[MemoryRecord] = []
    refused: list[str] = []
    room = max(0, MAX_PER_CHANGE - first)
    if len(candidates) > room:
        refused.append(f"{len(candidates) - room} candidates past the {MAX_PER_CHANGE} a change may hold")
    for i, wish in enumerate(candidates[:room], start=first):
        said = _problem(facts, wish, evidence)
        if said:
            refused.append(cut(f"candidate {i}: {said}", 300))
            continue
        fact = facts[wish.fact]
        provenance = evidence_ref(evidence[wish.source]) if wish.source else writer.source
        verified = writer.name in fact.verifiers and not (fact.high_impact and wish.source)
        # an active high-impact record carries the verifier's own signed event: the read door checks it
        vouched = writer.event if verified and fact.high_impact else None
        status = Status.ACTIVE if verified else Status.QUARANTINED
        why = f"written by verifier {writer.name}" if verified else _quarantined(fact, wish, writer)
        try:
            records.append(
                MemoryRecord(
                    id=record_id(task_id, state_version, i),
                    tenant=tenant,
                    subject=wish.subject,
                    fact=wish.fact,
                    value=wish.value,
                    writer=writer.name,
                    provenance=provenance,
                    derived_from=tuple(wish.derived_from),
                    task_id=task_id,
                    status=status,
                    verified_by=writer.name if verified else None,
                    created_at=now,
                    expires_at=now + fact.keep,
                    history=(Change(status=status, by="write door", reason=why, at=now),),
                    event=vouched,
                )
            )
        except ValidationError as exc:
            refused.append(cut(f"candidate {i}: {first_errors(exc)}", 300))
    return records, refused


Group = tuple[Writer, Sequence[Remember], Mapping[str, str]]  # who, what, the evidence it may cite


def all_admitted(
    facts: Mapping[str, Fact],
    groups: Sequence[Group],
    *,
    tenant: str,
    task_id: str,
    state_version: int,
    now: datetime,
) -> tuple[list[MemoryRecord], list[str]]:
    """`admitted` over a change's groups of candidates (each with its own writer), numbered across
    the change so that each record keeps an id of its own."""
    records: list[MemoryRecord] = []
    refused: list[str] = []
    first = 0
    for writer, wishes, evidence in groups:
        got, why = admitted(
            facts,
            wishes,
            writer=writer,
            tenant=tenant,
            task_id=task_id,
            state_version=state_version,
            evidence=evidence,
            now=now,
            first=first,
        )
        records += got
        refused += why
        first += len(wishes)
    return records, refused


LEARNED = "from a tool's answer: quarantined until a verifier releases it"


def learned_form(record: MemoryRecord) -> MemoryRecord:
    """What a tool's answer taught, as the write door keeps it whatever it says: quarantined, by
    nobody verified, with that said in its history. The executor seals this form; the relay
    rewrites what reaches it into it (a record already in it keeps its seal)."""
    form = record.model_copy(
        update={
            "status": Status.QUARANTINED,
            "verified_by": None,
            "event": None,
            "history": (
                Change(status=Status.QUARANTINED, by="write door", reason=LEARNED, at=record.created_at),
            ),
        }
    )
    same = form.model_copy(update={"seal": record.seal}) == record
    return form.model_copy(update={"seal": record.seal if same else None})


def _problem(facts: Mapping[str, Fact], wish: Remember, evidence: Mapping[str, str]) -> str:
    if not isinstance(wish, Remember):
        return f"not a Remember: {type(wish).__name__}"
    if wish.fact not in facts:
        return f"the app declares no fact {cut(repr(wish.fact), 70)}"
    if not isinstance(wish.subject, str) or not _SUBJECT.fullmatch(wish.subject):
        return f"subject {cut(repr(wish.subject), 70)} is not <kind>:<id>"
    if not isinstance(wish.value, str) or not wish.value.strip():
        return "an empty value"
    if len(wish.value) > VALUE_CHARS:
        return f"a value of {len(wish.value)} characters, past the {VALUE_CHARS} a record may hold"
    if wish.source and wish.source not in evidence:
        return f"source {cut(repr(wish.source), 70)} is no evidence document of this decision"
    return ""


def _quarantined(fact: Fact, wish: Remember, writer: Writer) -> str:
    if fact.high_impact and wish.source and writer.name in fact.verifiers:
        return (
            f"high-impact fact {fact.name} read from a document: only a verifier's own event makes it active"
        )
    return f"new record: {writer.name} is not a verifier of {fact.name}"


def shown(
    records: Iterable[MemoryRecord],
    *,
    tenant: str,
    subjects: Iterable[str],
    facts: Mapping[str, Fact],
    now: datetime,
) -> list[MemoryRecord]:
    """What the read door lets through, newest first: active, unexpired, the tenant's, about the
    subjects asked for, of the facts asked for (a fact kept `one` per subject: its newest only)."""
    wanted = set(subjects)
    fit = [
        r
        for r in records
        if r.tenant == tenant
        and r.subject in wanted
        and r.fact in facts
        and r.status is Status.ACTIVE
        and r.expires_at > now
    ]
    fit.sort(key=lambda r: (r.created_at, r.id), reverse=True)
    out, seen = [], set()
    for r in fit:
        if facts[r.fact].one and (r.subject, r.fact) in seen:
            continue
        seen.add((r.subject, r.fact))
        out.append(r)
    return out[:MAX_SHOWN]


def shown_from(
    docs: Iterable[Any],
    *,
    tenant: str,
    subjects: Iterable[str],
    facts: Mapping[str, Fact],
    now: datetime,
    check: Callable[[MemoryRecord, dict[str, Any]], str | None] | None = None,
    refused: list[tuple[MemoryRecord, str]] | None = None,
) -> list[MemoryRecord]:
    """`shown` over records as stored (each a JSON object), decoding strictly only those it may
    show: a subject full of records costs one cheap look at each, and a full decode of at most
    MAX_SHOWN (and of any that would be shown but does not decode: it is skipped, never shown).
    `check`: why a decoded record (and its object as stored) may not be shown after all (its seal,
    its verifier's event); one
    it refuses is skipped, so the next of its fact may stand in, and put on `refused` with why."""
    wanted = set(subjects)
    fit: list[tuple[datetime, str, dict[str, Any]]] = []
    for doc in docs:
        if not isinstance(doc, dict) or doc.get("status") != Status.ACTIVE.value:
            continue
        subject, fact = doc.get("subject"), doc.get("fact")
        if doc.get("tenant") != tenant or not isinstance(subject, str) or not isinstance(fact, str):
            continue
        if subject not in wanted or fact not in facts:
            continue
        try:
            expires, created = _when(doc["expires_at"]), _when(doc["created_at"])
        except (KeyError, TypeError, ValueError):
            continue
        if expires > now:
            fit.append((created, str(doc.get("id")), doc))
    fit.sort(key=lambda c: (c[0], c[1]), reverse=True)
    picked: list[MemoryRecord] = []
    taken: set[tuple[str, str]] = set()
    for _, _, doc in fit:
        if len(picked) == MAX_SHOWN:
            break
        key = (doc["subject"], doc["fact"])
        if facts[doc["fact"]].one and key in taken:
            continue
        try:
            record = MemoryRecord.decode(orjson.dumps(doc))  # as every stored record is decoded
        except DecodeError:
            continue
        said = check(record, doc) if check is not None else None
        if said:
            if refused is not None:
                refused.append((record, said))
            continue
        taken.add(key)
        picked.append(record)
    return shown(picked, tenant=tenant, subjects=wanted, facts=facts, now=now)


def _when(value: Any) -> datetime:
    """A stored time; TypeError or ValueError for anything but one with its offset."""
    if not isinstance(value, str):
        raise TypeError("not a time")
    found = datetime.fromisoformat(value)
    if found.tzinfo is None:
        raise ValueError("a time without its offset")
    return found


def window_item(record: MemoryRecord) -> dict[str, Any]:
    """A record as the window shows it: the fact, its value, and where it came from."""
    return {
        "id": record.id,
        "subject": record.subject,
        "fact": record.fact,
        "value": record.value,
        "writer": record.writer,
        "source": record.provenance,
        "verified_by": record.verified_by,
        "learned": record.created_at.isoformat(),
        "expires": record.expires_at.isoformat(),
        "trust": "memory",
    }
