"""The cost of one authorization decision: `authorize()` under the app's own Cedar policy, in
process, with its text parsed once (as the roles keep it). `wakeful bench` adds it to its figures."""

from __future__ import annotations

import statistics
import time
from typing import Any

from wakeful.authority.policy import authorize
from wakeful.authority.snapshot import Snapshot
from wakeful.sdk.app import App

ROUNDS = 2000
BATCHES = 5


def decision_us(app: App, rounds: int = ROUNDS) -> dict[str, float]:
    """Microseconds per decision (the median of BATCHES batches of `rounds`): an approval, and each
    tool of the app as gate 7 asks about it, with an approver and an amount in its context."""
    auth = Snapshot(
        approvers=frozenset({"alice", "bob", "carol"}), limit=1000, app=app.name, shipped=app.shipped_policy
    )
    task: dict[str, Any] = {"task": "t-bench", "workflow": "bench", "tenant": "default", "stage": "ready"}
    task |= {"requester": "svc", "amount": 2500, "currency": "EUR"}
    asks: dict[str, tuple[str, str, dict[str, Any]]] = {
        "approve": ("alice", "approve", {"version": 1, "now": 1_800_000_000})
    }
    for tool in app.tools:
        asks[tool.name] = ("alice", tool.name, {"amount": 2500, "approver": "alice", "version": 1})
    found: dict[str, float] = {}
    for name, (principal, action, context) in asks.items():
        authorize(principal, action, task, auth, context)  # the text parsed, as a role has it
        batches = []
        for _ in range(BATCHES):
            started = time.perf_counter()
            for _ in range(rounds):
                authorize(principal, action, task, auth, context)
            batches.append((time.perf_counter() - started) / rounds * 1e6)
        found[name] = round(statistics.median(batches), 1)
    return found
