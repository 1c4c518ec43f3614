"""Revoked signers, as one wake reads them: whose authority ended, when, who ended it and why.

`wakeful authority signers revoke KEY` removes the key (the door refuses its events from then on)
and records its principal here. A task that principal started or approved meets the rule its app
declares (App.revoked_signer, workflow/revoked.py): go on, or park for a person. Registering a
new key for the principal lifts the record. Pure: the store reads and writes the hash.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from wakeful.core.errors import ConfigError
from wakeful.state.replies import hash_reply

RULES = ("review", "continue")  # what an app may declare for its tasks of a revoked signer


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
    if not by.strip():
        raise ConfigError("--by", "say who revokes the signer; it is recorded")
    if not reason.strip():
        raise ConfigError("--reason", "say why; the reason is recorded and shown on every task it parks")
    return orjson.dumps({"key": key, "by": by, "reason": reason, "at": at})


def revoked_from(reply: Any) -> dict[str, Revocation]:
    """The revocations in force, from the stored hash (parsed or raw). A record that does not read
    as one still revokes its principal: damage never restores authority."""
    found: dict[str, Revocation] = {}
    for raw_principal, raw in hash_reply(reply).items():
        principal = raw_principal.decode("utf-8", "replace")
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            doc = None
        if not isinstance(doc, dict):
            doc = {"reason": "the revocation's record is unreadable"}
        key, by, reason, at = (str(doc.get(f, "")) for f in ("key", "by", "reason", "at"))
        found[principal] = Revocation(principal, key or "?", by or "?", reason, at)
    return found
