"""Memory: durable facts an app learns about a subject (a supplier, a customer), behind two doors.

An app declares each class of fact it keeps (`Fact`); a decision may return `Remember` candidates
in its `Next`, and the runtime writes them through the write door; a workflow names what it reads
back (`Recall`), and only active, unexpired records of those facts about those subjects reach the
model's window, each with where it came from. Nothing else writes memory: not the model, not a tool.

    Fact("remittance_account", high_impact=True, verifiers=("principal:verifier",), keep=timedelta(days=365))
    Next(..., remember=(Remember("supplier:acme", "remittance_account", account),))
    Workflow(..., recall=Recall(("remittance_account",), lambda ctx: (f"supplier:{ctx.state.slug}",)))

A record's writer is the principal whose signed event the deciding function was judging (a
deadline's decision: the runtime's gate), never the model. A new record is quarantined unless its
writer is one of its fact's `verifiers`; a high-impact fact also never becomes active from a
document (`Remember.source`), only from the verifier's own event. docs/memory.md tells the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

KEEP = timedelta(days=90)  # a record's life when its fact declares none


@dataclass(frozen=True)
class Fact:
    """A class of fact the app keeps. `verifiers` ("principal:<name>") may make its records active:
    by signing the event whose decision remembers it, or (not high-impact) by `wakeful memory
    release`. `high_impact` facts (payee or bank details, identity, limits) become active only
    from a verifier's own event, never from a document and never by a release. `one`: only the
    newest active record per subject is shown. Records expire `keep` after they are written."""

    name: str
    high_impact: bool = False
    verifiers: tuple[str, ...] = ()
    keep: timedelta = KEEP
    one: bool = True


@dataclass(frozen=True)
class Remember:
    """A memory candidate a decision returns: `value` of fact `fact` about `subject`
    ("<kind>:<id>", such as "supplier:acme-gmbh"). `source` names the evidence document of this
    decision it was read from ("" : the event itself); `derived_from` the ids of memory records it
    was derived from, so forgetting them forgets it too."""

    subject: str
    fact: str
    value: str
    source: str = ""
    derived_from: tuple[str, ...] = ()


@dataclass(frozen=True)
class Recall:
    """What a workflow reads back: records of `facts` about the subjects `subjects` names for the
    task as stored (a pure function of its Context)."""

    facts: tuple[str, ...]
    subjects: Callable[[Any], Collection[str]]
