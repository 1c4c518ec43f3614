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
import time
from collections.abc import Callable, Collection
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import orjson
import redis

from wakeful.authority import freezes, revocations
from wakeful.authority.documents import Policy
from wakeful.authority.kept import moved, token
from wakeful.authority.signer_seal import HMAC, SignerSeal, sealed_record
from wakeful.authority.snapshot import (
    APP_COMPAT,
    COMPAT_RULES,
    COMPAT_STAMPS,
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
from wakeful.core import secrets
from wakeful.core.errors import ConfigError
from wakeful.core.ids import DEFAULT_TENANT
from wakeful.schemas.signatures import Alg, VerifyKey
from wakeful.state import keys
from wakeful.state.replies import hash_reply

SWITCH_LOG_MAX = 10_000  # switches kept in the log (who, why, when), newest


class AuthorityStore:
    def __init__(self, client: redis.Redis, seal: SignerSeal | None = None) -> None:
        """`seal`: the role's signer seal, which opens the HMAC secrets of the signers it reads
        (a role that verifies no HMAC has none, and reads no secret: signer_seal.py)."""
        self.client = client
        self.seal = seal

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
            key, allowed = decode_signer(kid.decode(), raw, self.seal)
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
        return decode_signer(key_id, raw, self.seal) if isinstance(raw, bytes) else None

    # ---- write (operators) -------------------------------------------------------------------

    def add_approver(self, principal: str, app: str = "") -> None:
        """`principal` joins the approvers of `app` (no app: the shared set, read by apps with no
        authority of their own)."""
        self.client.sadd(self._own(app, keys.auth_approvers) if app else keys.AUTH_APPROVERS, principal)
        moved(self.client)

    def remove_approver(self, principal: str, app: str = "") -> bool:
        name = self._own(app, keys.auth_approvers) if app else keys.AUTH_APPROVERS
        removed = bool(self.client.srem(name, principal))
        moved(self.client)
        return removed

    def set_limit(self, amount: int, app: str = "") -> None:
        if amount < 0:
            raise ConfigError("limit", f"{amount} is negative; the approval limit is an amount >= 0")
        self.client.set(self._own(app, keys.auth_limit) if app else keys.AUTH_LIMIT, amount)
        moved(self.client)

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
        self,
        policy: str | None = None,
        tool_catalog: str | None = None,
        compat: dict[str, str] | None = None,
        *,
        app: str | None = None,
    ) -> None:
        """Set the deployed policy label and compatibility rules: for every app, or with `app` the
        rules for that app alone, which outrank what it declares (App.compat)."""
        compat = compat or {}
        problems = [
            f"compat.{name}: {name!r} is not one of {', '.join(COMPAT_STAMPS)}"
            for name in compat
            if name not in COMPAT_STAMPS
        ] + [
            f"compat.{name}: {rule!r} is not one of {', '.join(COMPAT_RULES)}"
            for name, rule in compat.items()
            if rule not in COMPAT_RULES
        ]
        if problems:
            raise ConfigError("compat", "; ".join(problems))
        current = self.snapshot()
        fields: dict[str, str] = {
            "policy": policy or current.policy,
            "tool_catalog": tool_catalog or current.tool_catalog,
        }
        if app is None:
            fields["compat"] = orjson.dumps({**current.compat, **compat}).decode()
        elif compat:
            fields[APP_COMPAT + app] = orjson.dumps({**current.compat_by_app.get(app, {}), **compat}).decode()
        self.client.hset(keys.AUTH_POLICY, mapping=fields)  # type: ignore[arg-type]
        moved(self.client)

    # ---- the kill path (authority/freezes.py) -------------------------------------------------

    def freeze(self, scope: str, by: str, reason: str) -> int:
        """Freeze `scope` (freezes.scope()): recorded, then the switch counter bumped. Returns the
        counter the roles must take in for the freeze to be acknowledged (switch_acks.py)."""
        return self._switch("freeze", scope, by, reason)

    def thaw(self, scope: str, by: str, reason: str) -> tuple[int, bool]:
        """Lift the freeze of `scope`. Returns the switch counter the roles must take in before
        the held tasks are woken (wake_held), and whether the scope was frozen."""
        was = bool(self.client.hexists(keys.AUTH_FROZEN, scope))
        return self._switch("thaw", scope, by, reason), was

    def wake_held(self) -> list[str]:
        """Wake every task with held work (a deadline due now, through the timer), and unmark it:
        its held wakes run at that wake, or, where another freeze still holds it, it is marked
        again. Call it once the roles have taken the thaw in: a hold judged before the thaw then
        is marked already, and one judged after it is no hold."""
        held = sorted(t.decode() for t in self.client.smembers(keys.HELD_TASKS))  # type: ignore[union-attr]
        now_ms = int(time.time() * 1000)
        for start in range(0, len(held), 500):
            batch = held[start : start + 500]
            self.client.zadd(keys.DEADLINES, {f"{task}|{now_ms}": now_ms for task in batch})
            self.client.srem(keys.HELD_TASKS, *batch)
        return held

    def frozen(self) -> dict[str, freezes.Freeze]:
        return freezes.frozen_from(self.client.hgetall(keys.AUTH_FROZEN))

    def switch_log(self, count: int = 20) -> list[dict[str, str]]:
        """The last `count` switches thrown, newest first."""
        entries = self.client.xrevrange(keys.AUTH_SWITCH_LOG, count=count)
        return [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in entries]  # type: ignore[union-attr]

    def _switch(self, action: str, scope: str, by: str, reason: str) -> int:
        at = datetime.now(UTC).isoformat()
        doc = freezes.record(by, reason, at)
        # One slot ({freeze}): the switch, its record, the authority token, the counter. A role
        # that has taken the counter in sees the new token at its next wake (kept.py).
        pipe = self.client.pipeline(transaction=True)
        if action == "freeze":
            pipe.hset(keys.AUTH_FROZEN, scope, doc)
        else:
            pipe.hdel(keys.AUTH_FROZEN, scope)
        pipe.xadd(keys.AUTH_SWITCH_LOG, self._logged(action, scope, by, reason, at), maxlen=SWITCH_LOG_MAX)
        pipe.set(keys.AUTH_VERSION, token())
        pipe.incr(keys.AUTH_SWITCHED)
        return int(pipe.execute()[-1])

    def switched(self) -> int:
        return int(self.client.get(keys.AUTH_SWITCHED) or 0)

    def forget_app_rules(self) -> None:
        """Drop every operator rule set for one app: each app's declared rules apply again."""
        names: list[Any] = self.client.hkeys(keys.AUTH_POLICY)  # bytes: the client decodes nothing
        fields = [f for f in names if f.startswith(APP_COMPAT.encode())]
        if fields:
            self.client.hdel(keys.AUTH_POLICY, *fields)
            moved(self.client)

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
        if self.client.hexists(keys.AUTH_REVOKED, revocations.name(tenant, principal)):
            raise ConfigError(
                "principal",
                f"{principal} of tenant {tenant} is revoked; after a look, lift it with "
                f"`wakeful authority signers unrevoke {principal} --tenant {tenant} --by P --reason R`",
            )
        doc: dict[str, object] = {
            "principal": principal,
            "alg": alg,
            "material": base64.b64encode(material).decode(),
            "kinds": kinds,
            "tenant": tenant,
        }
        if alg == HMAC:  # its secret is never stored whole (signer_seal.py)
            if self.seal is None:
                raise ConfigError(
                    "hmac-seal", f"no signer seal to seal {key_id}'s secret with: {secrets.MAKE_HINT}"
                )
            doc = sealed_record(doc, key_id, self.seal)
        self.client.hset(keys.AUTH_SIGNERS, key_id, orjson.dumps(doc))
        moved(self.client)

    def remove_signer(self, key_id: str) -> bool:
        removed = bool(self.client.hdel(keys.AUTH_SIGNERS, key_id))
        moved(self.client)
        return removed

    def revoke_signer(self, key_id: str, by: str, reason: str) -> str:
        """Revoke a signer key: its principal's revocation, in its tenant, is recorded (the tasks it
        started or approved meet their app's rule, workflow/revoked.py), then every key of that
        principal in that tenant is removed (the door refuses its events). Returns the principal.
        No key is registered for it again until unrevoke()."""
        found = self.signer(key_id)
        if found is None:
            known = sorted(k.decode() for k in self.client.hkeys(keys.AUTH_SIGNERS))  # type: ignore[union-attr]
            raise ConfigError(
                "KEY", f"no signer key {key_id!r} is registered; the keys: {', '.join(known) or 'none'}"
            )
        principal, tenant = found[0].principal, found[0].tenant
        at = datetime.now(UTC).isoformat()
        doc = revocations.record(key_id, by, reason, at)
        name = revocations.name(tenant, principal)
        pipe = self.client.pipeline(transaction=True)  # one slot ({freeze}): record, log, token
        pipe.hset(keys.AUTH_REVOKED, name, doc)  # first the tasks' rule, then the door
        pipe.set(keys.AUTH_VERSION, token())
        pipe.xadd(
            keys.AUTH_SWITCH_LOG,
            self._logged("revoke", f"signer:{name}", by, reason, at),
            maxlen=SWITCH_LOG_MAX,
        )
        pipe.execute()
        registered = (
            decode_signer(k.decode(), raw)[0]
            for k, raw in hash_reply(self.client.hgetall(keys.AUTH_SIGNERS)).items()
        )
        same = [key.key_id for key in registered if (key.principal, key.tenant) == (principal, tenant)]
        self.client.hdel(keys.AUTH_SIGNERS, key_id, *same)
        moved(self.client)
        return principal

    def unrevoke(self, principal: str, tenant: str, by: str, reason: str) -> bool:
        """Lift a principal's revocation: a key may be registered for it again (its tasks parked
        for it stay parked until a person reopens them). Recorded in the switch log."""
        at = datetime.now(UTC).isoformat()
        revocations.record("-", by, reason, at)  # who and why are required
        name = revocations.name(tenant, principal)
        pipe = self.client.pipeline(transaction=True)
        pipe.hdel(keys.AUTH_REVOKED, name)
        pipe.xadd(
            keys.AUTH_SWITCH_LOG,
            self._logged("unrevoke", f"signer:{name}", by, reason, at),
            maxlen=SWITCH_LOG_MAX,
        )
        pipe.set(keys.AUTH_VERSION, token())
        return bool(pipe.execute()[0])

    @staticmethod
    def _logged(action: str, scope: str, by: str, reason: str, at: str) -> Any:
        return {"switch": action, "scope": scope, "by": by, "reason": reason, "at": at}

    def revoked(self) -> dict[str, revocations.Revocation]:
        return revocations.revoked_from(self.client.hgetall(keys.AUTH_REVOKED))

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
            "compat_by_app": snap.compat_by_app,
            "tools_disabled": [switch.as_dict() for switch in snap.tool_switches.values()],
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
