"""The one authorization seam: `authorize(principal, action, resource, auth, context)`.

Every allow/deny in the pipeline is decided here, by the app's Cedar policy (authority/documents.py)
in the version the task is stamped with, against authority read live (the Snapshot). No memory
record and no model output reaches it: its inputs are the verified signer principal, the action
(an event kind or a tool), the task's public fields and the facts of the request.

What a policy sees:
- principal `Principal::"<name>"`, in `Group::"approvers"` when the app's approvers name it;
- action `Action::"<event kind or tool>"`;
- resource `Task::"<task id>"`, attributes `app` (`App::"<app>"`, attribute `limit`: the app's
  approval limit), `workflow`, `tenant`, `stage`, `requester` (a Principal) and the business fields
  the workflow exposes (Workflow.exposes), each a Long, String or Bool;
- context: `amount` (a Long, where the app exposes one), `approver` (a Principal) and `version` of
  the approval the task holds, `now` (seconds since the epoch), and, for a tool, `egress` (a Set of
  Strings: the entries it declares, names or host:port), each present only when known.

Only what the text can read is sent: an attribute of the task or the context whose name the policy
never reads after a `.` or a `has` is left out of the request (authority/attributes.py), which
cannot change a decision and saves Cedar parsing it (about 5 µs an attribute, 6 an entity).

The decision is Cedar's: allowed when a permit applies and no forbid does. A refusal names the
first forbid that applies, in the text's order, by its `@reason("...")`, whose `{name}` fields are
filled from the request; an action the text never names is refused as unknown.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cedarpy
import orjson

from wakeful.authority.attributes import EVERYTHING, Reads
from wakeful.authority.documents import Policy
from wakeful.authority.snapshot import Snapshot

LONG = range(-(2**63), 2**63)
APPROVERS_GROUP = {"type": "Group", "id": "approvers"}
_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_RUNTIME = frozenset({"task", "app", "requester"})
_WHOLE = frozenset({"amount", "version", "now"})


@dataclass(frozen=True)
class Authorization:
    """What authorize() says: allowed, or not and why."""

    allowed: bool
    reason: str = ""


ALLOW = Authorization(True)


def authorize(
    principal: str,
    action: str,
    resource: Mapping[str, Any],
    auth: Snapshot,
    context: Mapping[str, Any] | None = None,
    *,
    stamp: str | None = None,
) -> Authorization:
    """May `principal` do `action` to the task `resource` (its public fields) with `context`, under
    the policy version `stamp` names (the task's; default the one in force) and live authority?"""
    try:
        policy = auth.policy_for(stamp or auth.policy)
    except LookupError as exc:  # never judged by another text than its own: refused, with why
        return Authorization(False, str(exc))
    context = context or {}
    if "*" not in policy.actions and action not in policy.actions:
        return Authorization(False, f"unknown action {action!r}")
    request = {
        "principal": principal_uid(principal),
        "action": {"type": "Action", "id": action},
        "resource": {"type": "Task", "id": str(resource.get("task", ""))},
        "context": orjson.dumps(_context(context, policy.reads)).decode(),
    }
    allowed, reasons, errors = decide(request, policy.cedar, entities(resource, auth, policy.reads))
    if allowed and not errors:
        return ALLOW
    if allowed:  # a policy that fails to evaluate is skipped by Cedar: a forbid may be among them
        return Authorization(False, f"the policy could not be evaluated: {'; '.join(map(str, errors))}")
    facts = {"principal": principal, "action": action, "limit": auth.limit, **resource, **context}
    return Authorization(False, refusal(policy, reasons, action, facts))


def decide(
    request: dict[str, Any], policies: Any, found: cedarpy.Entities
) -> tuple[bool, list[str], list[Any]]:
    """Cedar's answer to one request: allowed, the policies that decided it, the errors. Through
    the extension's own call where this cedarpy has it (its public wrapper copies the request and
    parses the answer with the standard json module: a fifth of a decision's cost), else the
    public one."""
    if _DIRECT is not None:
        doc = orjson.loads(_DIRECT(request, policies, found._inner, None, False))
        diagnostics = doc.get("diagnostics") or {}
        return (
            doc.get("decision") == "Allow",
            list(diagnostics.get("reason", [])),
            list(diagnostics.get("errors", [])),
        )
    result = cedarpy.is_authorized(request, policies, found)
    return result.allowed, list(result.diagnostics.reasons), list(result.diagnostics.errors)


def refusal(policy: Policy, matched: list[str], action: str, facts: Mapping[str, Any]) -> str:
    """Why a request was denied: the first forbid that applied, by its reason, else its id."""
    for pid in sorted(matched, key=lambda p: policy.order.get(p, 0)):
        template = policy.reasons.get(pid)
        if template is not None:
            return _FIELD.sub(lambda m: _shown(facts[m[1]]) if m[1] in facts else m[0], template)
    if matched:
        return f"forbidden by policy {', '.join(sorted(matched))}"
    return f"no policy permits {action}"


# cedarpy's extension call, as its public is_authorized makes it (cedarpy 4.12); None where an
# other release moved it, and the public call is used.
_DIRECT = getattr(getattr(cedarpy, "_internal", None), "is_authorized", None)


def principal_uid(name: str) -> dict[str, str]:
    return {"type": "Principal", "id": name}


def entities(resource: Mapping[str, Any], auth: Snapshot, read: Reads = EVERYTHING) -> cedarpy.Entities:
    """The entities a request is judged with: the app and its approvers (parsed once for each
    authority read alike), and the task with the attributes the policy `read`s."""
    app = {"type": "App", "id": auth.app}
    attrs: dict[str, Any] = {
        k: v for k, v in resource.items() if k not in _RUNTIME and read.keeps(k) and _cedar(v) is not None
    }
    if read.keeps("app"):
        attrs["app"] = {"__entity": app}
    requester = resource.get("requester")
    if isinstance(requester, str) and read.keeps("requester"):
        attrs["requester"] = {"__entity": principal_uid(requester)}
    task = {"uid": {"type": "Task", "id": str(resource.get("task", ""))}, "attrs": attrs, "parents": [app]}
    return _authority(auth.app, auth.approvers, auth.limit).with_added_json_str(orjson.dumps([task]).decode())


@functools.lru_cache(maxsize=256)
def _authority(app: str, approvers: frozenset[str], limit: int) -> cedarpy.Entities:
    """The app's entity and its approvers', parsed: the same for every decision until they change."""
    uid = {"type": "App", "id": app}
    found = [{"uid": principal_uid(name), "attrs": {}, "parents": [APPROVERS_GROUP]} for name in approvers]
    return cedarpy.Entities.from_json_str(
        orjson.dumps([{"uid": uid, "attrs": {"limit": limit}, "parents": []}, *found]).decode()
    )


def _context(context: Mapping[str, Any], read: Reads = EVERYTHING) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, value in context.items():
        if not read.keeps(name):
            continue
        if name == "approver" and isinstance(value, str):
            found[name] = {"__entity": principal_uid(value)}
        elif name in _WHOLE:  # a Long or absent: a policy compares it without asking its type
            if isinstance(value, int) and not isinstance(value, bool) and value in LONG:
                found[name] = value
        elif _cedar(value) is not None:
            found[name] = value
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            found[name] = value  # a Set of Strings (a tool's egress)
    return found


def _cedar(value: object) -> object | None:
    """`value` as a Cedar Long, String or Bool, or None where it is none of them."""
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int) and value in LONG:
        return value
    return None


def _shown(value: object) -> str:
    return value if isinstance(value, str) else repr(value)
