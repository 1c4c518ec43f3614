"""Tool switches as authority data: an operator turns an app's tool off (and on again), live.

A switch is stored only while its tool is off (wk:authority:{tools}:switches): no field means the
tool is enabled, so a stack that never disabled anything reads an empty hash at each wake. Pure: the
store that writes these records is authority/tool_store.py; the executor's decision is
workflow/switches.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from wakeful.core.errors import ConfigError
from wakeful.state.replies import hash_reply

BY_LIMIT = 128  # characters of the principal who flips a switch
REASON_LIMIT = 500  # characters of why


@dataclass(frozen=True)
class ToolSwitch:
    """A tool of an app turned off: by whom, when (ISO 8601, UTC) and why."""

    app: str
    tool: str
    by: str
    at: str
    reason: str

    def receipt(self) -> str:
        """What a task refused by this switch records: the switch, named in full."""
        return (
            f"tool {self.tool} of app {self.app} is disabled (by {self.by} at {self.at}: {self.reason}); "
            f"nothing was called. After `wakeful tools enable {self.tool}`, `wakeful task reopen` runs it"
        )

    def as_dict(self) -> dict[str, str]:
        return {"app": self.app, "tool": self.tool, "by": self.by, "at": self.at, "reason": self.reason}


def field_of(app: str, tool: str) -> str:
    """The switches hash's field for `tool` of `app`: a JSON pair, so no name can forge another's
    (never change: it names stored switches)."""
    return orjson.dumps([app, tool]).decode()


def encode(switch: ToolSwitch) -> bytes:
    return orjson.dumps({"by": switch.by, "at": switch.at, "reason": switch.reason})


def switches_from(reply: Any) -> dict[str, ToolSwitch]:
    """field -> ToolSwitch from the reply to HGETALL of the switches hash (parsed or raw RESP). A
    record this code cannot read still names its tool as disabled: an unreadable switch is never
    read as "on"."""
    found: dict[str, ToolSwitch] = {}
    for raw_field, raw in hash_reply(reply).items():
        field = raw_field.decode("utf-8", "replace")
        try:
            app, tool = (str(name) for name in orjson.loads(field))
        except (orjson.JSONDecodeError, TypeError, ValueError):
            continue  # no field_of() makes it: no tool is named by it
        try:
            doc = orjson.loads(raw)
            found[field] = ToolSwitch(app, tool, str(doc["by"]), str(doc["at"]), str(doc["reason"]))
        except (orjson.JSONDecodeError, KeyError, TypeError):
            found[field] = ToolSwitch(app, tool, "?", "?", f"unreadable switch record {raw[:80]!r}")
    return found


def disabled(switches: Mapping[str, ToolSwitch], app: str, tool: str) -> ToolSwitch | None:
    """The switch that turns `tool` of `app` off, or None when it is on."""
    return switches.get(field_of(app, tool))


def checked_words(by: str, reason: str, *, reason_needed: bool) -> tuple[str, str]:
    """(by, reason) stripped, or a ConfigError naming the option to fix."""
    by, reason = by.strip(), reason.strip()
    if not by or len(by) > BY_LIMIT or any(c.isspace() for c in by):
        raise ConfigError("--by", f"{by[:60]!r} is not a principal: one word of 1 to {BY_LIMIT} characters")
    if reason_needed and not reason:
        raise ConfigError("--reason", "say why: the reason is recorded and shown to whoever meets the switch")
    if len(reason) > REASON_LIMIT:
        raise ConfigError("--reason", f"{len(reason)} characters; at most {REASON_LIMIT}")
    return by, reason
