"""A tool's calls per second (D109): which record holds a tool, and what it says. Pure: the
operator writes the records (authority/limit_store.py, scope `tool:A:T`), the executor reads them
with its Snapshot and counts each call (state/rates.py) before it makes it.

A rate holds a tool of an app to `calls_per_s` calls a second, `burst` of them at once after a
quiet spell, over every executor. A call that would go over waits its turn, its task's lease given
back meanwhile: never refused, never dead-lettered. A record that does not read never lifts a
limit: it holds the tool to DAMAGED_RATE.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from wakeful.authority.limit_store import MAX_BURST, MAX_RATE, MIN_RATE, read, tool_scope

DAMAGED_RATE = 1.0  # a call a second, one at a time: never none, which would lift the limit


@dataclass(frozen=True)
class Rate:
    """One tool's record, as read. `damaged` says why it did not read ("" when it did): it then
    holds the tool to DAMAGED_RATE."""

    scope: str
    calls_per_s: float
    burst: int
    by: str = ""
    at: str = ""
    reason: str = ""
    damaged: str = ""


def default_burst(calls_per_s: float) -> int:
    """The burst a rate gets when none is named: a second's calls, at least one."""
    return max(1, min(MAX_BURST, math.floor(calls_per_s)))


def parse(scope: str, raw: str | bytes) -> Rate:
    """The record `raw` of `scope`; one that does not read holds at DAMAGED_RATE, with why."""
    doc = read(raw)
    if isinstance(doc, str):
        return Rate(scope, DAMAGED_RATE, 1, damaged=doc)
    rate, burst = doc.get("calls_per_s"), doc.get("burst")
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not MIN_RATE <= rate <= MAX_RATE:
        return Rate(scope, DAMAGED_RATE, 1, damaged=f"calls_per_s is {rate!r}, not from {MIN_RATE}")
    if isinstance(burst, bool) or not isinstance(burst, int) or not 1 <= burst <= MAX_BURST:
        return Rate(scope, DAMAGED_RATE, 1, damaged=f"burst is {burst!r}, not a whole number from 1")
    said = {k: str(doc.get(k, "")) for k in ("by", "at", "reason")}
    return Rate(scope, float(rate), burst, **said)


def rate_of(limits: Mapping[str, str], app: str, tool: str) -> Rate | None:
    """The rate that holds `tool` of `app`, or None: its calls are not counted."""
    raw = limits.get(tool_scope(app, tool))
    return parse(tool_scope(app, tool), raw) if raw is not None else None
