"""The authority store in Redis: approvers, the approval limit, registered signer keys, policy.

Operators write it (`wakeful authority ...`, as the admin Redis user); the inbound, gate and
executor roles only read it, live, at every wake. Nothing here is ever copied into Progress.
"""

from __future__ import annotations

import base64
import functools
import re
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
import redis

from wakeful.core.errors import ConfigError
from wakeful.producers.signing import DEFAULT_TENANT, Alg, VerifyKey
from wakeful.state import keys
from wakeful.state.pinned import hash_reply

DEFAULT_LIMIT = 1000
DEFAULT_POLICY = "refund-policy-1"
DEFAULT_CATALOG = "catalog-1"
# What happens when a task's stamped version differs from what is deployed now (gate 4).
#   pin: keep running under the version the task started with
#   migrate: re-stamp the task with the deployed version and go on
#   quarantine: park the task for a person
DEFAULT_COMPAT = {"policy": "pin", "tool_catalog": "quarantine"}
COMPAT_RULES = ("pin", "migrate", "quarantine")
TENANT = keys.TENANT  # it names a Redis key (the tenant's token counter)


@dataclass(frozen=True)
class ToolDef:
    name: str
    description: str
    stages: tuple[str, ...]
    irreversible: bool


DEFAULT_TOOLS = (
    ToolDef(
        name="refund",
        description="Refund the task's amount to the customer through the bank, once, under its op key.",
        stages=("ready",),
        irreversible=True,
    ),
)


@dataclass(frozen=True)
class Snapshot:
    """Authority as read at one wake."""

    approvers: frozenset[str]
    limit: int
    signers: dict[str, VerifyKey] = field(default_factory=dict)
    signer_kinds: dict[str, frozenset[str]] = field(default_factory=dict)
    policy: str = DEFAULT_POLICY
    tool_catalog: str = DEFAULT_CATALOG
    compat: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_COMPAT))
    tools: tuple[ToolDef, ...] = DEFAULT_TOOLS

    def tools_at(self, stage: str) -> tuple[ToolDef, ...]:
        return tuple(t for t in self.tools if stage in t.stages)


class AuthorityStore:
    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    # ---- read (every role, every wake) -------------------------------------------------------

    def snapshot(self, with_signers: bool = False) -> Snapshot:
        pipe = self.client.pipeline(transaction=False)
        for command in SNAPSHOT_READS:
            pipe.execute_command(*command)  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
        if with_signers:
            pipe.hgetall(keys.AUTH_SIGNERS)
        replies = pipe.execute()
        snap = snapshot_from(replies[:3])
        if not with_signers:
            return snap
        signers: dict[str, VerifyKey] = {}
        kinds: dict[str, frozenset[str]] = {}
        for kid, raw in hash_reply(replies[3]).items():
            key, allowed = decode_signer(kid.decode(), raw)
            signers[key.key_id] = key
            kinds[key.key_id] = allowed
        return replace(snap, signers=signers, signer_kinds=kinds)

    def signer(self, key_id: str) -> tuple[VerifyKey, frozenset[str]] | None:
        raw = self.client.hget(keys.AUTH_SIGNERS, key_id)
        return decode_signer(key_id, raw) if isinstance(raw, bytes) else None

    # ---- write (operators) -------------------------------------------------------------------

    def add_approver(self, principal: str) -> None:
        self.client.sadd(keys.AUTH_APPROVERS, principal)

    def remove_approver(self, principal: str) -> bool:
        return bool(self.client.srem(keys.AUTH_APPROVERS, principal))

    def set_limit(self, amount: int) -> None:
        if amount < 0:
            raise ConfigError("limit", f"{amount} is negative; the approval limit is an amount >= 0")
        self.client.set(keys.AUTH_LIMIT, amount)

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

    def describe(self) -> dict[str, Any]:
        snap = self.snapshot(with_signers=True)
        return {
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


# The reads a Snapshot is made of, for callers that batch them with their own (snapshot_from).
SNAPSHOT_READS: tuple[tuple[str, ...], ...] = (
    ("SMEMBERS", keys.AUTH_APPROVERS),
    ("GET", keys.AUTH_LIMIT),
    ("HGETALL", keys.AUTH_POLICY),
)


def snapshot_from(replies: list[Any]) -> Snapshot:
    """A Snapshot from the replies to SNAPSHOT_READS, in order (parsed or raw RESP replies)."""
    approvers, limit, policy = replies
    fields = {k.decode(): v.decode() for k, v in hash_reply(policy).items()}
    return Snapshot(
        approvers=frozenset(a.decode() for a in approvers),  # a set (parsed) or a list (raw)
        limit=int(limit) if limit is not None else DEFAULT_LIMIT,
        policy=fields.get("policy", DEFAULT_POLICY),
        tool_catalog=fields.get("tool_catalog", DEFAULT_CATALOG),
        compat={**DEFAULT_COMPAT, **orjson.loads(fields.get("compat", "{}"))},
    )


def check_signer(kinds: Collection[str], known: Collection[str], tenant: str) -> None:
    """Raise ConfigError, naming the setting, unless every kind is known and the tenant well formed."""
    unknown = set(kinds) - set(known)
    if unknown:
        raise ConfigError(
            "kinds", f"unknown event kinds {sorted(unknown)}; the app knows: {', '.join(sorted(known))}"
        )
    if not re.fullmatch(TENANT, tenant):
        raise ConfigError("tenant", f"{tenant[:70]!r} is not a tenant name ({TENANT})")


@functools.lru_cache(maxsize=4096)
def decode_signer(key_id: str, raw: bytes) -> tuple[VerifyKey, frozenset[str]]:
    """A signer record as stored; one written before tenants signs for the default tenant. Cached
    by the record's exact bytes: a changed or re-keyed record is other bytes, so it is read anew."""
    doc = orjson.loads(raw)
    tenant = doc.get("tenant", DEFAULT_TENANT)
    key = VerifyKey(key_id, doc["alg"], base64.b64decode(doc["material"]), doc["principal"], tenant)
    return key, frozenset(doc["kinds"])
