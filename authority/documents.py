"""Policy documents: an app's Cedar policy versions, their stamps, and their parsed, cached form.

Pure (cedarpy parses in-process; no Redis): the store that keeps the versions is
authority/policy_store.py, the evaluation authority/policy.py.

- A version is one Cedar text an operator deployed for one app, numbered per app 1, 2, 3, ...,
  with its sha256 digest, who deployed it, when and why. A version is never rewritten: a rollback is
  a new version carrying an older text.
- The version in force is the highest. A task is stamped `policy-<app>-v<n>` (never change: stored
  in checkpoints); a stamp no version of the app carries (a label from before versions, given by
  `authority policy set --policy`) is evaluated under the policy the app ships (App.policy).
- Parsing is the dominant cost of a Cedar decision, so a text is parsed once per process and kept
  by its digest: versions never change, and a digest names one text.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import cedarpy
import orjson

from wakeful.authority.attributes import EVERYTHING, Reads, reads
from wakeful.core.errors import ConfigError

STAMP = re.compile(r"policy-(?P<app>[A-Za-z0-9_-]{1,64})-v(?P<version>[1-9][0-9]{0,8})")
ACTION_TYPE = "Action"
REASON = "reason"  # the annotation a forbid names its refusal with: @reason("...")

# What an app that ships no policy and has none deployed runs under: approvals by the app's
# approvers other than the requester; every other action is the signers' registered kinds' and the
# app's own checks'.
DEFAULT_TEXT = """\
@reason("not an authorised approver")
forbid (principal, action == Action::"approve", resource)
unless { principal in Group::"approvers" };

@reason("a requester cannot approve their own request")
forbid (principal, action == Action::"approve", resource)
when { principal == resource.requester };

permit (principal, action, resource);
"""


def stamp(app: str, version: int) -> str:
    """The policy stamp of `app`'s version `version` (never change: stored in checkpoints)."""
    return f"policy-{app}-v{version}"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Version:
    """One deployed version of an app's policy, as the store keeps it."""

    app: str
    version: int
    text: str
    digest: str
    by: str
    at: str  # ISO 8601, UTC
    reason: str

    @property
    def stamp(self) -> str:
        return stamp(self.app, self.version)

    def encode(self) -> bytes:
        return orjson.dumps(self.__dict__)

    @classmethod
    def decode(cls, raw: bytes | str) -> Version:
        return cls(**orjson.loads(raw))

    def listed(self) -> dict[str, Any]:
        """The version without its text, as `policy list` shows it."""
        return {k: v for k, v in self.__dict__.items() if k != "text"}


def new_version(
    app: str,
    existing: list[int],
    text: str,
    *,
    by: str,
    reason: str,
    now: datetime,
    check: Callable[[str], list[str]] | None = None,
) -> Version:
    """The next version of `app`'s policy after the versions `existing`; ConfigError naming every
    problem if `text` does not parse, breaks `check` (the app's schema, authority/schema.py) or
    `by` names no one (nothing is stored on error)."""
    if not by.strip():
        raise ConfigError("by", "name who deploys the policy (--by)")
    parse(text)
    wrong = check(text) if check is not None else []
    if wrong:
        raise ConfigError("policy", "; ".join(wrong))
    return Version(app, max(existing, default=0) + 1, text, digest(text), by, now.isoformat(), reason)


def rollback_of(
    versions: list[Version], to: int | None, *, by: str, reason: str | None, now: datetime
) -> Version:
    """A new version carrying the text of version `to` (default: the one before the version in
    force), so the history keeps both the change and its undoing."""
    if not versions:
        raise ConfigError("app", "no policy version is deployed for this app: nothing to roll back")
    by_number = {v.version: v for v in versions}
    current = max(by_number)
    target = current - 1 if to is None else to
    if target not in by_number or target == current:
        known = ", ".join(f"v{n}" for n in sorted(by_number) if n != current) or "none"
        raise ConfigError(
            "to", f"v{target} is not an earlier version of this app's policy (earlier: {known})"
        )
    old = by_number[target]
    return new_version(
        old.app, list(by_number), old.text, by=by, reason=reason or f"rollback to v{target}", now=now
    )


@dataclass(frozen=True)
class Policy:
    """A parsed policy text: the Cedar set, the actions it names, each policy's place and reason."""

    digest: str
    cedar: cedarpy.PolicySet
    actions: frozenset[str]
    order: dict[str, int]  # Cedar's policy id -> its place in the text (the first reason is told)
    reasons: dict[str, str]  # policy id -> its @reason("...") template
    reads: Reads = EVERYTHING  # the attributes it can read: the rest is never sent to Cedar


def split(text: str) -> list[tuple[int, str]]:
    """The text's policies, each with the line it starts on: cut at each `;` outside a string or
    comment, so each can be parsed alone and every error be named."""
    cuts: list[int] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
        elif text[i] == ";":
            cuts.append(i + 1)
        i += 1
    parts, start = [], 0
    for end in [*cuts, n]:
        chunk = text[start:end]
        lines = chunk.splitlines()
        blank = next((k for k, s in enumerate(lines) if s.strip() and not s.strip().startswith("//")), None)
        if blank is not None:
            parts.append((text.count("\n", 0, start) + 1 + blank, chunk))
        start = end
    return parts


def problems(text: str) -> list[str]:
    """Every policy in `text` that does not parse, each named by its line and Cedar's error."""
    found = []
    for line, part in split(text):
        try:
            cedarpy.PolicySet.from_str(part)
        except ValueError as exc:
            found.append(f"line {line}: {exc}")
    if not found and not split(text):
        found.append("the text holds no policy")
    return found


_parsed: dict[str, Policy] = {}
_lock = threading.Lock()


def parse(text: str) -> Policy:
    """`text` parsed, from the cache when this process has parsed it before; ConfigError naming
    every policy that does not parse."""
    key = digest(text)
    found = _parsed.get(key)
    if found is not None:
        return found
    try:
        cedar = cedarpy.PolicySet.from_str(text)
    except ValueError as exc:
        raise ConfigError("policy", "; ".join(problems(text)) or str(exc)) from exc
    if len(cedar) == 0:
        raise ConfigError("policy", "the text holds no policy")
    tree = orjson.loads(cedarpy.policies_to_json_str(text))
    doc = tree["staticPolicies"]
    reasons = {pid: p["annotations"][REASON] for pid, p in doc.items() if REASON in p.get("annotations", {})}
    places = {pid: _place(pid) for pid in doc}
    policy = Policy(key, cedar, _actions(doc.values()), places, reasons, reads(tree))
    with _lock:
        return _parsed.setdefault(key, policy)


def cached(key: str) -> Policy | None:
    """The text of digest `key` parsed, if this process has parsed it."""
    return _parsed.get(key)


def _place(policy_id: str) -> int:
    """Where Cedar's positional id `policy<N>` stands in the text (N)."""
    return int(policy_id.removeprefix("policy")) if re.fullmatch(r"policy[0-9]+", policy_id) else 0


def _actions(policies: Any) -> frozenset[str]:
    """The action names the policies name; None stands for a policy that names every action."""
    names: set[str] = set()
    for p in policies:
        scope = p["action"]
        for entity in scope.get("entities", [scope["entity"]] if "entity" in scope else []):
            names.add(entity["id"])
        if scope["op"] == "All":
            names.add("*")
    return frozenset(names)
