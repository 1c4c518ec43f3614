"""Authority as one wake reads it: the Snapshot, and how it is made from Redis replies.

Pure, so an app's rules (which read a Snapshot) and the SDK load no Redis client; the store that
reads and writes these keys is authority/store.py.
"""

from __future__ import annotations

import base64
import functools
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from wakeful.authority import documents, switches
from wakeful.authority.documents import Policy
from wakeful.authority.freezes import Freeze, frozen_from
from wakeful.authority.revocations import Revocation, revoked_from
from wakeful.authority.signer_seal import SignerSeal
from wakeful.authority.switches import ToolSwitch
from wakeful.core import ids
from wakeful.core.errors import ConfigError
from wakeful.core.ids import DEFAULT_TENANT
from wakeful.schemas.signatures import VerifyKey
from wakeful.state import keys
from wakeful.state.replies import hash_reply

DEFAULT_LIMIT = 1000
# The label of an app with no policy version deployed, where `authority policy set --policy` set
# none (a store from before versions holds the label it was given, and its tasks keep their stamps).
DEFAULT_POLICY = "policy-1"
DEFAULT_CATALOG = "catalog-1"
# What happens when a task's stamped version differs from what is deployed now (gate 4).
#   pin: keep running under the version the task started with
#   migrate: re-stamp the task with the deployed version and go on
#   quarantine: park the task for a person
DEFAULT_COMPAT = {"policy": "pin", "tool_catalog": "quarantine"}
COMPAT_RULES = ("pin", "migrate", "quarantine")
COMPAT_STAMPS = ("policy", "tool_catalog")
APP_COMPAT = "compat:"  # the policy hash's field of one app's operator rules: compat:<app>
TENANT = ids.TENANT  # it names a Redis key (the tenant's token counter)


@dataclass(frozen=True)
class Snapshot:
    """Authority as read at one wake, for the app `app`: its approvers and approval limit, the
    policy stamp in force (`policy`), and its policy versions parsed (`policies`, by stamp;
    `shipped` is what a stamp no version carries runs under: the app's own text, else
    documents.DEFAULT_TEXT)."""

    approvers: frozenset[str]
    limit: int
    signers: dict[str, VerifyKey] = field(default_factory=dict)
    signer_kinds: dict[str, frozenset[str]] = field(default_factory=dict)
    policy: str = DEFAULT_POLICY
    tool_catalog: str = DEFAULT_CATALOG
    compat: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_COMPAT))
    # An operator's rules for one app (`authority policy set --compat ... --app A`): they outrank
    # the app's declared ones (App.compat), which outrank `compat` (compat.rules_for).
    compat_by_app: dict[str, dict[str, str]] = field(default_factory=dict)
    frozen: dict[str, Freeze] = field(default_factory=dict)  # the freezes in force (freezes.py)
    revoked: dict[str, Revocation] = field(default_factory=dict)  # revoked signers (revocations.py)
    # The tools operators turned off, by switches.field_of(app, tool); none by default.
    tool_switches: dict[str, ToolSwitch] = field(default_factory=dict)
    # The tenants' in-flight limits as stored, scope -> JSON record; workflow/limits.py reads them.
    limits: dict[str, str] = field(default_factory=dict)
    app: str = ""
    policies: Mapping[str, Policy] = field(default_factory=dict)
    shipped: Policy | None = None
    unloaded: tuple[int, ...] = ()  # versions the index names whose text this process has not parsed
    # The app's rollouts as stored: workflow -> its record (workflow/rollouts.py reads it, D122).
    rollouts: Mapping[str, bytes] = field(default_factory=dict)

    def tool_switch(self, app: str, tool: str) -> ToolSwitch | None:
        """The switch that turns `tool` of `app` off, or None when it is on."""
        return switches.disabled(self.tool_switches, app, tool)

    def policy_for(self, stamp: str) -> Policy:
        """The parsed policy a task stamped `stamp` is judged by (see documents.py)."""
        found = self.policies.get(stamp)
        if found is not None:
            return found
        named = documents.STAMP.fullmatch(stamp)
        if named and named["app"] == self.app and int(named["version"]) in self.unloaded:
            raise LookupError(f"policy {stamp} is named by the app's index but could not be read")
        return self.shipped or documents.parse(documents.DEFAULT_TEXT)


# The reads a Snapshot is made of, for callers that batch them with their own (snapshot_from):
# the shared ones, then the app's own (app_reads).
SNAPSHOT_READS: tuple[tuple[str, ...], ...] = (
    ("SMEMBERS", keys.AUTH_APPROVERS),
    ("GET", keys.AUTH_LIMIT),
    ("HGETALL", keys.AUTH_POLICY),
    ("HGETALL", keys.AUTH_FROZEN),
    ("HGETALL", keys.AUTH_REVOKED),
    ("HGETALL", keys.AUTH_TOOL_SWITCHES),
    ("HGETALL", keys.AUTH_LIMITS),
)


def app_reads(app: str) -> tuple[tuple[str, ...], ...]:
    """The app's approvers, approval limit, policy index (version -> digest) and rollouts."""
    return (
        ("SMEMBERS", keys.auth_approvers(app)),
        ("GET", keys.auth_limit(app)),
        ("HGETALL", keys.auth_policy_index(app)),
        ("HGETALL", keys.auth_rollouts(app)),
    )


def snapshot_reads(app: str) -> tuple[tuple[str, ...], ...]:
    return (*SNAPSHOT_READS, *app_reads(app))


SNAPSHOT_LEN = len(SNAPSHOT_READS) + 4  # replies to snapshot_reads(app)


def snapshot_from(replies: list[Any], app: str = "", shipped: Policy | None = None) -> Snapshot:
    """A Snapshot from the replies to SNAPSHOT_READS (no app) or snapshot_reads(app), in order
    (parsed or raw RESP replies). An app with no limit of its own is one whose authority was kept
    before it was per app: it reads the shared approvers and limit."""
    approvers, limit, policy, frozen, revoked, tool_switches, limits = replies[: len(SNAPSHOT_READS)]
    fields = {k.decode(): v.decode() for k, v in hash_reply(policy).items()}
    deployed = fields.get("policy", DEFAULT_POLICY)
    loaded: dict[str, Policy] = {}
    unloaded: list[int] = []
    rollouts: dict[str, bytes] = {}
    if app:
        own_approvers, own_limit, index, rolling = replies[len(SNAPSHOT_READS) : SNAPSHOT_LEN]
        rollouts = {k.decode(): v for k, v in hash_reply(rolling).items()}  # D122
        if own_limit is not None:
            approvers, limit = own_approvers, own_limit
        versions = {int(k): v.decode() for k, v in hash_reply(index).items()}
        for version, key in versions.items():
            parsed = documents.cached(key)
            if parsed is None:
                unloaded.append(version)
            else:
                loaded[documents.stamp(app, version)] = parsed
        if versions:
            deployed = documents.stamp(app, max(versions))
    return Snapshot(
        approvers=frozenset(a.decode() for a in approvers),  # a set (parsed) or a list (raw)
        limit=int(limit) if limit is not None else DEFAULT_LIMIT,
        policy=deployed,
        tool_catalog=fields.get("tool_catalog", DEFAULT_CATALOG),
        compat={**DEFAULT_COMPAT, **stored_rules(fields.get("compat", "{}"))},
        compat_by_app={
            name[len(APP_COMPAT) :]: stored_rules(raw)
            for name, raw in fields.items()
            if name.startswith(APP_COMPAT)
        },
        frozen=frozen_from(frozen),
        revoked=revoked_from(revoked),
        tool_switches=switches.switches_from(tool_switches),
        limits={k.decode(): v.decode("utf-8", "replace") for k, v in hash_reply(limits).items()},
        app=app,
        policies=loaded,
        shipped=shipped,
        unloaded=tuple(sorted(unloaded)),
        rollouts=rollouts,
    )


def stored_rules(raw: str) -> dict[str, str]:
    """Compatibility rules as stored (JSON {stamp: rule}). Anything else read there (not JSON, not a
    mapping of names to rules) is no rule to trust: every stamp is quarantined until it is fixed."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in doc.items()):
        return doc
    return dict.fromkeys(COMPAT_STAMPS, "quarantine")


def policy_reads(snap: Snapshot) -> list[tuple[str, ...]]:
    """What to read for the policy versions `snap` names but this process has not parsed yet:
    nothing, once each version has been read once (a version never changes)."""
    if not snap.unloaded:
        return []
    return [("HMGET", keys.auth_policies(snap.app), *map(str, snap.unloaded))]


def with_policies(snap: Snapshot, replies: list[Any]) -> Snapshot:
    """`snap` with the versions policy_reads() asked for parsed (and cached for the process)."""
    if not snap.unloaded:
        return snap
    loaded = dict(snap.policies)
    for raw in replies[0]:
        if raw is not None:
            version = documents.Version.decode(raw)
            loaded[version.stamp] = documents.parse(version.text)
    # A version the index names but the store lacks stays unloaded: judged by nothing, refused.
    missing = tuple(v for v in snap.unloaded if documents.stamp(snap.app, v) not in loaded)
    return replace(snap, policies=loaded, unloaded=missing)


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
def decode_signer(
    key_id: str, raw: bytes, seal: SignerSeal | None = None
) -> tuple[VerifyKey, frozenset[str]]:
    """A signer record as stored; one written before tenants signs for the default tenant. Cached
    by the record's exact bytes (and the seal): a changed or re-keyed record is other bytes.

    An HMAC secret is sealed (authority/signer_seal.py): only `seal` opens it. Without it, or when
    it cannot open it, the key holds no secret, and nothing verifies against it. A record of the
    release before, its secret whole in `material`, is read as it is until it is resealed."""
    doc = orjson.loads(raw)
    tenant = doc.get("tenant", DEFAULT_TENANT)
    if "sealed" in doc:
        opened = seal.open(key_id, doc["alg"], doc["sealed"]) if seal is not None else None
        material = opened or b""
    else:
        material = base64.b64decode(doc["material"])
    key = VerifyKey(key_id, doc["alg"], material, doc["principal"], tenant)
    return key, frozenset(doc["kinds"])
