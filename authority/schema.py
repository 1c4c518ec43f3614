"""What an app's policy may name, as a Cedar schema: checked when the policy is deployed and when
the app is loaded, so a misspelt attribute or action is named then, not when a request meets it.

Pure. The shapes are those authority/policy.py builds for every request: Principal (in Group),
Group, App (`limit`), Task (`app`, `workflow`, `tenant`, `stage`, `requester`, and the fields the
app's workflows expose, each optional), and one context for every action (`amount`, `approver`,
`version`, `now`, each optional). The actions are the runtime's (RUNTIME_ACTIONS), the app's own
event kinds and its tools.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import cedarpy
import orjson

from wakeful.authority import documents

# The runtime's own event kinds, by the names a policy gives them (authority/policy.py's callers).
RUNTIME_ACTIONS = ("approve", "create", "amend", "run", "reopen", "cancel")
CEDAR_TYPES = {int: "Long", str: "String", bool: "Boolean"}


def _optional(kind: str, **more: Any) -> dict[str, Any]:
    return {"type": kind, "required": False, **more}


def schema(actions: Collection[str], fields: Mapping[str, str]) -> str:
    """The Cedar schema (JSON) of an app whose actions are `actions` and whose workflows expose
    `fields` (name -> Cedar type: Long, String or Boolean)."""
    principal = {"type": "Entity", "name": "Principal"}
    task = {
        **{name: _optional(kind) for name, kind in fields.items()},  # the runtime's own fields win
        "app": {"type": "Entity", "name": "App"},
        "workflow": {"type": "String"},
        "tenant": {"type": "String"},
        "stage": {"type": "String"},
        "requester": {**principal, "required": False},
    }
    context = {
        "amount": _optional("Long"),
        "approver": {**principal, "required": False},
        "version": _optional("Long"),
        "now": _optional("Long"),
    }
    applies = {"principalTypes": ["Principal"], "resourceTypes": ["Task"]}
    applies["context"] = {"type": "Record", "attributes": context}  # type: ignore[assignment]
    doc = {
        "": {
            "entityTypes": {
                "Principal": {"memberOfTypes": ["Group"], "shape": {"type": "Record", "attributes": {}}},
                "Group": {"shape": {"type": "Record", "attributes": {}}},
                "App": {"shape": {"type": "Record", "attributes": {"limit": {"type": "Long"}}}},
                "Task": {"memberOfTypes": ["App"], "shape": {"type": "Record", "attributes": task}},
            },
            "actions": {name: {"appliesTo": applies} for name in sorted(set(actions))},
        }
    }
    return orjson.dumps(doc).decode()


def invalid(text: str, app_schema: str) -> list[str]:
    """What in `text` the schema does not allow, each named by the line its policy starts on."""
    lines = [line for line, _ in documents.split(text)]
    found = []
    for error in cedarpy.validate_policies(text, app_schema).errors:
        place = error.policy_id.removeprefix("policy")
        line = lines[int(place)] if place.isdigit() and int(place) < len(lines) else None
        message = error.error.removeprefix(f"for policy `{error.policy_id}`, ")
        if "unable to find an applicable action" in message:
            continue  # said already, as the unknown action it comes from
        found.append(f"line {line}: {message}" if line else message)
    return found
