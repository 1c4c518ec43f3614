"""A tool's calls per second (D109) and calls at once (D111): which record holds a tool, and what
it says. Pure: the operator writes the records (authority/limit_store.py, scope `tool:A:T`), the
executor reads them with its Snapshot and counts each call (state/rates.py) before it makes it.

A record holds a tool of an app to `calls_per_s` calls a second, `burst` of them at once after a
quiet spell, and to `max_in_flight` calls running at once, over every executor; it may say either
or both. A call that would go over waits its turn, its task's lease given back meanwhile: never
refused, never dead-lettered. A record that does not read never lifts a limit: it holds the tool
to DAMAGED_RATE and DAMAGED_AT_ONCE.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from wakeful.authority.limit_store import MAX_BURST, MAX_IN_FLIGHT, MAX_RATE, MIN_RATE, read, tool_scope

DAMAGED_RATE = 1.0  # a call a second, one at a time: never none, which would lift the limit
DAMAGED_AT_ONCE = 1  # one call running at a time


@dataclass(frozen=True)
class Rate:
    """One tool's record, as read: its calls a second and burst (None: not counted) and its calls
    at once (None: not counted). `damaged` says why it did not read ("" when it did): it then holds
    the tool to DAMAGED_RATE and DAMAGED_AT_ONCE."""

    scope: str
    calls_per_s: float | None
    burst: int
    max_in_flight: int | None = None
    by: str = ""
    at: str = ""
    reason: str = ""
    damaged: str = ""


def default_burst(calls_per_s: float) -> int:
    """The burst a rate gets when none is named: a second's calls, at least one."""
    return max(1, min(MAX_BURST, math.floor(calls_per_s)))


def parse(scope: str, raw: str | bytes) -> Rate:
    """The record `raw` of `scope`; one that does not read holds at the damaged values, with why."""
    doc = read(raw)
    if isinstance(doc, str):
        return _damaged(scope, doc)
    if "calls_per_s" not in doc and "max_in_flight" not in doc:
        return _damaged(scope, "it names neither calls_per_s nor max_in_flight")
    rate, burst, at_once = doc.get("calls_per_s"), doc.get("burst", 1), doc.get("max_in_flight")
    if rate is not None and (
        isinstance(rate, bool) or not isinstance(rate, int | float) or not MIN_RATE <= rate <= MAX_RATE
    ):
        return _damaged(scope, f"calls_per_s is {rate!r}, not from {MIN_RATE}")
    if not _whole(burst, MAX_BURST):
        return _damaged(scope, f"burst is {burst!r}, not a whole number from 1")
    if at_once is not None and not _whole(at_once, MAX_IN_FLIGHT):
        return _damaged(scope, f"max_in_flight is {at_once!r}, not a whole number from 1")
    said = {k: str(doc.get(k, "")) for k in ("by", "at", "reason")}
    return Rate(scope, None if rate is None else float(rate), burst, at_once, **said)


def _whole(value: object, most: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= most


def _damaged(scope: str, why: str) -> Rate:
    return Rate(scope, DAMAGED_RATE, 1, DAMAGED_AT_ONCE, damaged=why)


def rate_of(limits: Mapping[str, str], app: str, tool: str) -> Rate | None:
    """The rate that holds `tool` of `app`, or None: its calls are not counted."""
    raw = limits.get(tool_scope(app, tool))
    return parse(tool_scope(app, tool), raw) if raw is not None else None
