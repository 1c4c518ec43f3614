"""An authority change an app's owners sign (D124): the approval limit its policy reads, a policy
version deployed or rolled back, a rollout started, widened or taken back. Each is named by its
digest, which the owners sign as they sign a release (authority/signoffs.py: the same sign-off,
the same registry, one principal per role), so a change is applied only as its owners saw it: a
different amount, policy text or tenant is another digest nobody signed.

Pure: the CLI asks for the sign-offs before it writes (cli/owner_gate.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

DOMAIN = b"wakeful.authority.change.v1\n"  # no release digest is taken over bytes that begin so
APPROVAL_LIMIT, POLICY, ROLLOUT = "approval_limit", "policy", "rollout"
KINDS = (APPROVAL_LIMIT, POLICY, ROLLOUT)


@dataclass(frozen=True)
class Change:
    """One change to what an app's tasks run under: its app, its kind and what it sets."""

    app: str
    kind: str
    value: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"a change is one of {', '.join(KINDS)}, not {self.kind!r}")

    def canonical(self) -> bytes:
        doc = {"app": self.app, "kind": self.kind, "value": dict(self.value)}
        return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)

    def digest(self) -> str:
        return hashlib.sha256(DOMAIN + self.canonical()).hexdigest()

    def said(self) -> str:
        """The change in a reviewer's words: its kind and what it sets."""
        shown = ", ".join(f"{k} {v}" for k, v in sorted(self.value.items()))
        return f"{self.kind.replace('_', ' ')} of app {self.app}: {shown}"


def text_digest(text: str) -> str:
    """A policy text's digest, as a change names it (the owners sign the text, not a file name)."""
    return hashlib.sha256(text.encode()).hexdigest()
