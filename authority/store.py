"""The authority store in Redis: each app's approvers and approval limit, registered signer keys,
the compatibility rules; each app's policy versions are authority/policy_store.py's.

Operators write it (`wakeful authority ...`, as the admin Redis user); the inbound, gate and
executor roles only read it, live, at every wake. Nothing here is ever copied into Progress.

Approvers and the limit were once shared by every app (wk:authority:approvers, :limit). An app
with no limit of its own still reads those; the first write to an app's approvers or limit copies
them into the app's own keys first, so the app goes on from what it had.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Collection
from dataclasses import replace
from typing import Any

import orjson
import redis

from wakeful.authority.documents import Policy
from wakeful.authority.snapshot import (
    COMPAT_RULES,
    DEFAULT_LIMIT,
    SNAPSHOT_READS,
    Snapshot,
    check_signer,
    decode_signer,
    policy_reads,
    snapshot_from,
    snapshot_reads,
    with_policies,
)
from wakeful.core.errors import ConfigError
from wakeful.core.ids import DEFAULT_TENANT
from wakeful.producers.signing import Alg, VerifyKey
from wakeful.state import keys
from wakeful.state.replies import hash_reply


class AuthorityStore:
    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    # ---- read (every role, every wake) -------------------------------------------------------

    def snapshot(self, with_signers: bool = False, app: str = "", shipped: Policy | None = None) -> Snapshot:
        """Authority as a role of `app` reads it (no app: the shared keys only)."""
        reads = snapshot_reads(app) if app else SNAPSHOT_READS
        replies = self._read([*reads, *([("HGETALL", keys.AUTH_SIGNERS)] if with_signers else [])])
        snap = snapshot_from(replies[: len(reads)], app, shipped)
        more = policy_reads(snap)
        if more:
            snap = with_policies(snap, self._read(more))
        if not with_signers:
            return snap
        signers: dict[str, VerifyKey] = {}
        kinds: dict[str, frozenset[str]] = {}
        for kid, raw in hash_reply(replies[-1]).items():
            key, allowed = decode_signer(kid.decode(), raw)
            signers[key.key_id] = key
            kinds[key.key_id] = allowed
        return replace(snap, signers=signers, signer_kinds=kinds)

    def _read(self, commands: list[tuple[str, ...]] | tuple[tuple[str, ...], ...]) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
        return pipe.execute()

    def signer(self, key_id: str) -> tuple[VerifyKey, frozenset[str]] | None:
        raw = self.client.hget(keys.AUTH_SIGNERS, key_id)
        return decode_signer(key_id, raw) if isinstance(raw, bytes) else None

    # ---- write (operators) -------------------------------------------------------------------

    def add_approver(self, principal: str, app: str = "") -> None:
        """`principal` joins the approvers of `app` (no app: the shared set, read by apps with no
        authority of their own)."""
        self.client.sadd(self._own(app, keys.auth_approvers) if app else keys.AUTH_APPROVERS, principal)

    def remove_approver(self, principal: str, app: str = "") -> bool:
        name = self._own(app, keys.auth_approvers) if app else keys.AUTH_APPROVERS
        return bool(self.client.srem(name, principal))

    def set_limit(self, amount: int, app: str = "") -> None:
        if amount < 0:
            raise ConfigError("limit", f"{amount} is negative; the approval limit is an amount >= 0")
        self.client.set(self._own(app, keys.auth_limit) if app else keys.AUTH_LIMIT, amount)

    def _own(self, app: str, key: Callable[[str], str]) -> str:
        """`key(app)`, after giving `app` approvers and a limit of its own if it has none yet: a
        copy of the shared ones it read until now (SET NX: a limit already its own is kept)."""
        if not self.client.exists(keys.auth_limit(app)):
            shared = self._read([("SMEMBERS", keys.AUTH_APPROVERS), ("GET", keys.AUTH_LIMIT)])
            pipe = self.client.pipeline()
            if shared[0]:
                pipe.sadd(keys.auth_approvers(app), *shared[0])
            pipe.set(keys.auth_limit(app), shared[1] if shared[1] is not None else DEFAULT_LIMIT, nx=True)
            pipe.execute()
        return key(app)

    def set_policy(
        self, policy: str | None = None, tool_catalog: str | None = None, compat: dict[str, str] | None = None
    ) -> None:
        compat = compat or {}
        for name, rule in compat.items():
            if rule not in COMPAT_RULES:
                raise ConfigError(f"compat.{name}", f"{rule!r} is not one of {', '.join(COMPAT_RULES)}")
        current = self.snapshot()
        fields: dict[str, str] = {
            "policy": policy or current.policy,
            "tool_catalog": tool_catalog or current.tool_catalog,
            "compat": orjson.dumps({**current.compat, **compat}).decode(),
        }
        self.client.hset(keys.AUTH_POLICY, mapping=fields)  # type: ignore[arg-type]

    def register_signer(
        self,
        key_id: str,
        principal: str,
        alg: Alg,
        material: bytes,
        kinds: tuple[str, ...],
        *,
        known: Collection[str],
        tenant: str = DEFAULT_TENANT,
    ) -> None:
        """Register (or replace) a signer key for `kinds`, each one of the `known` kinds: those of the
        app the operator runs (App.kinds). The store loads no app: its caller says what is known."""
        check_signer(kinds, known, tenant)
        doc = {
            "principal": principal,
            "alg": alg,
            "material": base64.b64encode(material).decode(),
            "kinds": kinds,
            "tenant": tenant,
        }
        self.client.hset(keys.AUTH_SIGNERS, key_id, orjson.dumps(doc))

    def remove_signer(self, key_id: str) -> bool:
        return bool(self.client.hdel(keys.AUTH_SIGNERS, key_id))

    def initialised(self) -> bool:
        return bool(self.client.exists(keys.AUTH_LIMIT))

    def describe(self, app: str = "") -> dict[str, Any]:
        snap = self.snapshot(with_signers=True, app=app)
        return {
            **({"app": app} if app else {}),
            "approvers": sorted(snap.approvers),
            "limit": snap.limit,
            "policy": snap.policy,
            "tool_catalog": snap.tool_catalog,
            "compat": snap.compat,
            "signers": {
                kid: {
                    "principal": key.principal,
                    "tenant": key.tenant,
                    "alg": key.alg,
                    "kinds": sorted(snap.signer_kinds[kid]),
                }
                for kid, key in snap.signers.items()
            },
        }
