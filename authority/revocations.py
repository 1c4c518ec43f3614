"""Revoked signers, as one wake reads them: whose authority ended, when, who ended it and why.

`wakeful authority signers revoke KEY` removes the key (the door refuses its events from then on)
and records its principal, of its tenant, here. A task that principal started or approved meets
the rule its app declares (App.revoked_signer, workflow/revoked.py): go on, or park for a person.
No key is registered for a revoked principal until an operator lifts the revocation (`wakeful
authority signers unrevoke`). Pure: the store reads and writes the hash.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wakeful.authority.freezes import checked_record, read_record
from wakeful.state.replies import hash_reply

RULES = ("review", "continue")  # what an app may declare for its tasks of a revoked signer


def name(tenant: str, principal: str) -> str:
    """A revocation's field: a principal of one tenant (another tenant's of that name is another)."""
    return f"{tenant}/{principal}"


@dataclass(frozen=True)
class Revocation:
    principal: str
    key: str
    by: str
    reason: str
    at: str

    def said(self) -> str:
        return f"signer {self.principal} ({self.key}) was revoked by {self.by} at {self.at}: {self.reason}"


def record(key: str, by: str, reason: str, at: str) -> bytes:
    return checked_record(by, reason, at, why="the reason is shown on every task it parks", key=key)


def revoked_from(reply: Any) -> dict[str, Revocation]:
    """The revocations in force by name() (tenant/principal), from the stored hash (parsed or raw).
    A record that does not read as one still revokes its principal: damage never restores
    authority."""
    found: dict[str, Revocation] = {}
    for raw_name, raw in hash_reply(reply).items():
        field = raw_name.decode("utf-8", "replace")
        principal = field.partition("/")[2] or field
        doc = read_record(raw, "the revocation's record is unreadable")
        found[field] = Revocation(principal, doc["key"], doc["by"], doc["reason"], doc["at"])
    return found
