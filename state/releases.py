"""Releases and their owners' sign-offs (D121), kept in the authority keyspace, so the sealed copy
on wakeful.authority carries them (D70) and a lost Redis gets them back:

    wk:authority:releases   hash  "<app>:<digest>" -> JSON: the release as proposed (its parts,
                                  who proposed it and when, what `release check` said)
                                  "<app>:<digest>:<role>:<principal>" -> JSON: one sign-off

Written by the admin (`wakeful release propose`, `wakeful release sign`); read by each gate and
executor at start (HMGET of exactly the sign-offs its app's owners could have made). Bytes only
here: a sign-off is believed only once its signature verifies (authority/signoffs.py), so one
planted in Redis counts for nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from wakeful.state import keys


class Releases:
    def __init__(self, client: Any, app: str) -> None:
        self.client, self.app = client, app

    def propose(self, digest: str, raw: bytes) -> bool:
        """Keep the release as first proposed (never replaced); whether this was the first."""
        return bool(self.client.hsetnx(keys.AUTH_RELEASES, f"{self.app}:{digest}", raw))

    def proposal(self, digest: str) -> bytes | None:
        found: bytes | None = self.client.hget(keys.AUTH_RELEASES, f"{self.app}:{digest}")
        return found

    def sign(self, digest: str, role: str, principal: str, raw: bytes) -> None:
        """Keep a sign-off (a principal's later one in the same role replaces it)."""
        self.client.hset(keys.AUTH_RELEASES, f"{self.app}:{digest}:{role}:{principal}", raw)

    def signoffs(self, digest: str, owners: Mapping[str, Sequence[str]]) -> list[bytes]:
        """The stored sign-offs of `digest` by each (role, principal) `owners` names."""
        fields = [f"{self.app}:{digest}:{role}:{who}" for role, names in owners.items() for who in names]
        if not fields:
            return []
        return [raw for raw in self.client.hmget(keys.AUTH_RELEASES, fields) if raw is not None]

    @staticmethod
    def signed(client: Any, digest: str) -> list[bytes]:
        """Every sign-off stored for the release `digest`, whatever its app."""
        return [
            raw
            for name, raw in client.hscan_iter(keys.AUTH_RELEASES, match=f"*:{digest}:*", count=500)
            if name
        ]
