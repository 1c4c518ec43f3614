"""Evidence kept as references: each document once per tenant by its content digest, with a TTL and
the source it came from; a task holds the reference and a short excerpt.

    writes(tenant, task_id, documents, source, at)   -> (ahead, inside): the gate sends `ahead`
        before its transaction (the documents, in slots of their own: SET NX, then EXPIRE GT so a
        document cited again lives on) and `inside` in it (the task's references and excerpts)
    excerpt(value)                                    a task's evidence field, as its window shows it
    Evidence(admin).fetch(tenant, ref) / .forget(tenant, ref)   a document again, or gone with
        every excerpt of it (`wakeful memory forget --lineage`)

Keys (state/keys.py's table): wk:ev:{N.D}:doc, wk:ev:{N.D}:tasks, wk:{T}:evidence. A field written
before references (plain text, the whole document) is read as its own excerpt until `wakeful dev
up` moves it into a document and a reference (state/upgrades.py: `upgrade`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
import redis

from wakeful.core import ids
from wakeful.schemas.memory import EVIDENCE_REF, EXCERPT_CHARS, evidence_ref
from wakeful.state import keys

Command = tuple[Any, ...]
REF_PREFIX = EVIDENCE_REF
ref_of = evidence_ref  # a document's reference: its content digest (what memory records cite)


def digest_of(ref: str) -> str:
    """The digest a reference names; ValueError for anything that is not a reference."""
    digest = ref.removeprefix(REF_PREFIX)
    if (
        not ref.startswith(REF_PREFIX)
        or len(digest) != 64
        or not all(c in "0123456789abcdef" for c in digest)
    ):
        raise ValueError(f"{ref[:80]!r} is not an evidence reference ({REF_PREFIX}<64 hex digits>)")
    return digest


def field(task_id: str, name: str) -> str:
    """A document's field in its task's evidence hash (its name in the window; never change)."""
    return f"evidence:{task_id}:{name}"


def writes(
    tenant: str, task_id: str, documents: Mapping[str, str], source: str, at: datetime
) -> tuple[list[Command], list[Command]]:
    """(ahead of the task's transaction, inside it) for the documents a change attached."""
    ahead: list[Command] = []
    inside: list[Command] = []
    for name, text in documents.items():
        ref = ref_of(text)
        digest = ref.removeprefix(REF_PREFIX)
        doc = orjson.dumps({"text": text, "source": source, "at": at.isoformat()})
        ahead += [
            ("SET", keys.evidence_doc(tenant, digest), doc, "NX", "EX", keys.EVIDENCE_TTL_S),
            ("EXPIRE", keys.evidence_doc(tenant, digest), keys.EVIDENCE_TTL_S, "GT"),
            ("SADD", keys.evidence_tasks(tenant, digest), task_id),
            ("EXPIRE", keys.evidence_tasks(tenant, digest), keys.EVIDENCE_TTL_S),  # lives as the document
        ]
        held = {"ref": ref, "source": source, "excerpt": text[:EXCERPT_CHARS], "chars": len(text)}
        inside.append(("HSET", keys.evidence(task_id), field(task_id, name), orjson.dumps(held)))
    return ahead, inside


def upgrade(admin: redis.Redis, task_id: str, name: str, text: str, at: datetime) -> None:
    """A field written before references (the whole document, as plain text) moved into a
    document and a reference, as the admin (state/upgrades.py)."""
    head, dot, _ = task_id.rpartition(".")
    tenant = head if dot else ids.DEFAULT_TENANT
    ahead, inside = writes(tenant, task_id, {name.rpartition(":")[2]: text}, "upgrade", at)
    pipe = admin.pipeline(transaction=False)
    for command in [*ahead, *inside]:
        pipe.execute_command(*command)  # type: ignore[no-untyped-call]
    if inside[0][2] != name:  # a field under another name than field() makes: keep that name
        pipe.hset(keys.evidence(task_id), name, inside[0][3])
        pipe.hdel(keys.evidence(task_id), inside[0][2])
    pipe.execute()


def held(value: str) -> dict[str, Any]:
    """A task's evidence field: {ref, source, excerpt, chars}; a field from before references
    (plain text) is its own excerpt, with no reference."""
    if value.startswith("{"):
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError:
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("excerpt"), str) and isinstance(doc.get("ref"), str):
            return doc
    return {"ref": None, "source": None, "excerpt": value[:EXCERPT_CHARS], "chars": len(value)}


def excerpt(value: str) -> str:
    return str(held(value)["excerpt"])


@dataclass(frozen=True)
class Forgotten:
    document: bool  # whether the document itself was still there
    excerpts: list[tuple[str, str]]  # (task id, field) of every excerpt removed


class Evidence:
    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def fetch(self, tenant: str, ref: str) -> dict[str, Any] | None:
        """The document `ref` names ({text, source, at}), or None once it expired or was forgotten."""
        raw = self.client.get(keys.evidence_doc(tenant, digest_of(ref)))
        if not isinstance(raw, bytes):
            return None
        doc = orjson.loads(raw)
        return (
            doc
            if isinstance(doc, dict) and doc.get("text") is not None and ref_of(doc["text"]) == ref
            else None
        )

    def citing(self, tenant: str, ref: str) -> list[str]:
        members: set[bytes] = self.client.smembers(keys.evidence_tasks(tenant, digest_of(ref)))  # type: ignore[assignment]
        return sorted(m.decode() for m in members if ids.TASK_ID_RE.fullmatch(m.decode()))

    def tenants(self, ref: str) -> list[str]:
        """The tenants that hold the document `ref` names, or an excerpt of it."""
        digest = digest_of(ref)
        found: set[str] = set()
        for pattern in (keys.PATTERN_EVIDENCE_DOC, keys.PATTERN_EVIDENCE_TASKS):
            match = pattern.replace("{*}", f"{{*.{digest}}}")
            for name in self.client.scan_iter(match=match, count=1000):
                text = name.decode() if isinstance(name, bytes) else str(name)
                found.add(text[text.index("{") + 1 : text.rindex(".")])
        return sorted(t for t in found if ids.TENANT_RE.fullmatch(t))

    def forget(self, tenant: str, ref: str, *, dry_run: bool = False) -> Forgotten:
        """The document and every task's excerpt of it, deleted (or, with dry_run, only found)."""
        digest = digest_of(ref)
        removed: list[tuple[str, str]] = []
        for task_id in self.citing(tenant, ref):
            found: dict[bytes, bytes] = self.client.hgetall(keys.evidence(task_id))  # type: ignore[assignment]
            removed += [
                (task_id, name.decode())
                for name, value in found.items()
                if held(value.decode("utf-8", "replace")).get("ref") == ref
            ]
        there = bool(self.client.exists(keys.evidence_doc(tenant, digest)))
        if not dry_run:
            pipe = self.client.pipeline(transaction=False)
            for citing, name in removed:
                pipe.hdel(keys.evidence(citing), name)
            pipe.delete(keys.evidence_doc(tenant, digest))
            pipe.delete(keys.evidence_tasks(tenant, digest))
            pipe.execute()
        return Forgotten(there, removed)
