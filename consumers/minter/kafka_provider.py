"""The minter's second provider (D123): a Kafka delegation token per step of a tool whose credential
names a Kafka downstream (core/kafka_downstream.py), owned by the downstream's owner principal, so
the token may write that downstream's topics and nothing else.

A token is made only for a step that is running (core/grants.running, on the task's lease and the
op key's intent, read just before), lives WAKEFUL_CREDENTIAL_TTL_S at most (the broker ends it by
itself), and is expired as soon as its step ends. Its HMAC (the login's password) is held in this
process's memory alone, to expire it with: never in Redis, the log or a reply but the one to the
step. A record of it, without the HMAC, is in wk:{minted} like a Redis user's, so `wakeful
authority credentials list` shows it; `revoke` removes the record, and the next pass here expires
every token whose record is gone.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis
from kafka.errors import KafkaError

from wakeful.core import grants, kafka_auth
from wakeful.core.grants import Grant
from wakeful.core.log import Log
from wakeful.core.minting import TIMEOUT_S
from wakeful.core.settings import Settings
from wakeful.producers.kafka_tokens import TokenRefused, Tokens
from wakeful.state import keys, minted

# A token request's longest wait, and finding the cluster's: both together, at a first mint, stay
# under the executor's wait for a mint (core/minting.TIMEOUT_S), with a second to spare.
TIMEOUT_MS = (int(TIMEOUT_S * 1000) - 1000) // 2
ROLE = "minter"  # its Kafka login (core/kafka_rights.py), the renewer of every token it makes
_LOG = Log(role="minter")


class KafkaProvider:
    """Tokens for the Kafka downstreams `owners` (downstream -> owner principal's name)."""

    def __init__(self, settings: Settings, owners: dict[str, str], ttl_ms: int) -> None:
        self.settings, self.owners, self.ttl_ms = settings, owners, ttl_ms
        self.hmacs: dict[str, str] = {}  # token id -> HMAC, of the tokens made here and not yet ended
        self._tokens: Tokens | None = None

    def tokens(self) -> Tokens:
        if self._tokens is None:  # at the first mint: a minter of Redis credentials alone never logs in
            # bounded by TIMEOUT_MS: a slow broker fails the attempt, which is tried again later
            self._tokens = Tokens(kafka_auth.kafka_python_config(self.settings, ROLE), timeout_ms=TIMEOUT_MS)
        return self._tokens

    def make(self, client: redis.Redis, asked: Sequence[Grant]) -> list[dict[str, object]]:
        """Each grant's answer: a token made for its running step, or why not."""
        said: list[dict[str, object]] = []
        made: list[tuple[Grant, str, int]] = []
        try:
            found = minted.reads(client, asked)
        except redis.RedisError as exc:
            return [{"ok": False, "error": f"Redis: {exc}"} for _ in asked]
        for grant, read in zip(asked, found, strict=True):
            if why := grants.running(grant, *read):
                said.append({"ok": False, "error": f"no credential for {grant.tool}: {why}", "refused": why})
                continue
            try:
                token = self.tokens().create(
                    self.owners[grant.scope], [kafka_auth.user_name(ROLE)], self.ttl_ms
                )
            except (TokenRefused, KafkaError, OSError) as exc:
                said.append({"ok": False, "error": f"Kafka made no token: {exc}"})
                continue
            self.hmacs[token.token_id] = token.hmac
            made.append((grant, token.token_id, token.expires_ms))
            said.append(
                {
                    "ok": True,
                    "user": token.token_id,
                    "password": token.hmac,
                    "expires_ms": token.expires_ms,
                    "bootstrap": self.settings.kafka_bootstrap,
                    "security": self.settings.kafka_security,
                }
            )
        try:
            minted.note(client, made)
        except redis.RedisError as exc:  # unrecorded, it could not be listed or revoked: ended now
            self.end([token_id for _, token_id, _ in made])
            return [{"ok": False, "error": f"Redis: {exc}"} if s.get("ok") else s for s in said]
        return said

    def end(self, token_ids: Sequence[str]) -> list[str]:
        """Expire these tokens (those made here); returns the ids whose expiry the broker took."""
        if not self.hmacs:
            return []
        ended = []
        for token_id in token_ids:
            hmac = self.hmacs.get(token_id)
            if hmac is None:
                continue
            try:
                self.tokens().expire(hmac)
            except (TokenRefused, KafkaError, OSError) as exc:  # it ends by itself at its lifetime
                _LOG("minter.token_unexpired", token=token_id, error=str(exc)[:200])
            del self.hmacs[token_id]
            ended.append(token_id)
        return ended

    def revoked(self, client: redis.Redis) -> list[str]:
        """Expire the tokens made here whose record is gone (`wakeful authority credentials
        revoke` removed it); returns their ids."""
        live = list(self.hmacs)
        if not live:
            return []
        records = client.hmget(keys.MINTED, live)
        return self.end([t for t, record in zip(live, records, strict=True) if record is None])

    def close(self) -> None:
        self.end(list(self.hmacs))
        if self._tokens is not None:
            self._tokens.close()
