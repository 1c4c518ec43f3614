"""An app's policy versions in the authority store: deploy, list, show, roll back.

Operators write them (`wakeful authority policy ...`, as the admin Redis user); the roles read the
index (version -> digest) at every wake and a version's text once per process
(authority/snapshot.py). A version is written once and never rewritten: the record and its index
entry go in one transaction, WATCHed on the index, so two deploys at once get two numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import redis

from wakeful.authority import documents
from wakeful.authority.documents import Version
from wakeful.authority.kept import moved
from wakeful.core.errors import ConfigError, Contention
from wakeful.state import keys


class PolicyStore:
    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def versions(self, app: str) -> list[Version]:
        """Every version of `app`'s policy, oldest first."""
        raw = self.client.hgetall(keys.auth_policies(app))
        return sorted((Version.decode(v) for v in raw.values()), key=lambda v: v.version)

    def version(self, app: str, number: int | None = None) -> Version | None:
        """Version `number` of `app`'s policy (default: the one in force), or None."""
        if number is None:
            index = self.client.hkeys(keys.auth_policy_index(app))
            if not index:
                return None
            number = max(int(k) for k in index)
        raw = self.client.hget(keys.auth_policies(app), str(number))
        return Version.decode(raw) if isinstance(raw, bytes) else None

    def deploy(
        self,
        app: str,
        text: str,
        *,
        by: str,
        reason: str = "",
        check: Callable[[str], list[str]] | None = None,
    ) -> Version:
        """Store `text` as `app`'s next version, in force from the roles' next wake; ConfigError,
        storing nothing, naming every problem with the text (`check`: the app's schema's)."""
        now = datetime.now(UTC)
        return self._write(
            app,
            lambda existing: documents.new_version(
                app, existing, text, by=by, reason=reason, now=now, check=check
            ),
        )

    def rollback(self, app: str, *, by: str, reason: str | None = None, to: int | None = None) -> Version:
        """A new version carrying an older text (default: the one before the version in force)."""
        return self._write(
            app,
            lambda _: documents.rollback_of(
                self.versions(app), to, by=by, reason=reason, now=datetime.now(UTC)
            ),
        )

    def _write(self, app: str, make: Callable[[list[int]], Version]) -> Version:
        index = keys.auth_policy_index(app)
        for _ in range(keys.CAS_RETRIES):
            with self.client.pipeline(transaction=True) as pipe:  # a cluster's too: the app's slot
                try:
                    pipe.watch(index)  # type: ignore[no-untyped-call]  # redis-py leaves watch() untyped
                    existing = [int(k) for k in pipe.hkeys(index)]
                    version = make(existing)
                    pipe.multi()
                    pipe.hset(keys.auth_policies(app), str(version.version), version.encode())
                    pipe.hset(index, str(version.version), version.digest)
                    pipe.execute()
                    moved(self.client)  # after: the version and index are in the app's slot
                    return version
                except redis.WatchError:
                    continue
        raise Contention(f"policy of app {app}", keys.CAS_RETRIES)


def read_text(path: str) -> str:
    """A policy file's text; ConfigError naming the file when it cannot be read as UTF-8."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("policy file", f"cannot read {path}: {exc}") from exc
