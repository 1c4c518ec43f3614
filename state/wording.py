"""The deployed tool wordings, by digest (D119): one hash, `wk:wordings`, field `<app>:<digest>` ->
the JSON entries (sdk.tools.wording) whose digest a catalog stamp's second part holds, and
`<app>:current` -> the digest deployed last; `<app>:release` -> the parts of the release deployed
last (workflow/release_digest.py, D121), what `release check` diffs a new one against. Written by
each gate and executor at start (HSETNX:
a digest's entries never change), read by the gate to show a task its pinned wording, and by
`wakeful release check` (admin). Bytes only here: what is read is checked against its digest
above (workflow/wording.verified), so a planted entry shows nothing."""

from __future__ import annotations

from typing import Any

from wakeful.state import keys

CURRENT = "current"
RELEASE = "release"  # no digest is this word


class Wordings:
    def __init__(self, client: Any, app: str) -> None:
        self.client = client
        self.app = app

    def publish(self, digest: str, raw: bytes) -> None:
        """Store a wording under its digest (never replaced) and make it the current one."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hsetnx(keys.WORDINGS, f"{self.app}:{digest}", raw)
        pipe.hset(keys.WORDINGS, f"{self.app}:{CURRENT}", digest)
        pipe.execute()

    def current(self) -> str | None:
        """The digest deployed last, if any."""
        found = self.client.hget(keys.WORDINGS, f"{self.app}:{CURRENT}")
        return found.decode(errors="replace") if found else None

    def raw(self, digest: str) -> bytes | None:
        found: bytes | None = self.client.hget(keys.WORDINGS, f"{self.app}:{digest}")
        return found

    def publish_release(self, parts: bytes) -> None:
        """Say which release (its parts, as JSON) was deployed last."""
        self.client.hset(keys.WORDINGS, f"{self.app}:{RELEASE}", parts)

    def deployed_release(self) -> bytes | None:
        found: bytes | None = self.client.hget(keys.WORDINGS, f"{self.app}:{RELEASE}")
        return found
