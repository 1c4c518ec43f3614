"""How long an app's finished tasks and what they leave behind stay in Redis (docs/retention.md).

An app declares `Retention(...)`; `wakeful task purge` applies it. Each value is a timedelta, counted
from a task's last change (closed tasks, receipts), a document's last cite (evidence) or a
record's write (memory). The log, wakeful.log, keeps every change for as long as the operator sets
the topic's retention, whatever these say (WAKEFUL_LOG_RETENTION_DAYS).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

# The runtime's defaults: what an app that declares nothing gets.
CLOSED_TASKS = timedelta(days=30)
RECEIPTS = timedelta(days=7)  # a receipt's TTL (state/keys.py RECEIPT_TTL_S): it cannot be longer
EVIDENCE = timedelta(days=90)  # a document's TTL from its last cite (state/keys.py EVIDENCE_TTL_S)
# A finished task is kept at least this long: far past any event's max age and the door's replay
# window, so no event signed while the task lived can be accepted again after it goes.
CLOSED_TASKS_FLOOR = timedelta(days=1)
RECEIPTS_FLOOR = timedelta(hours=1)  # a sender reads its receipt shortly after it publishes


@dataclass(frozen=True)
class Retention:
    """closed_tasks: a finished task's Redis keys go this long after its last change (a task that
    waits, is parked for review or is quarantined never goes). receipts and evidence: kept at most
    this long (no longer than their TTL). memory: a remembered record goes this long after it was
    written, or None: at its own expiry only."""

    closed_tasks: timedelta = CLOSED_TASKS
    receipts: timedelta = RECEIPTS
    evidence: timedelta = EVIDENCE
    memory: timedelta | None = None


DEFAULT = Retention()


def problems(retention: object) -> list[str]:
    """Every problem of a declared retention, each a line."""
    if not isinstance(retention, Retention):
        return [f"its retention must be a wakeful.sdk.Retention, not {type(retention).__name__}"]
    found: list[str] = []
    spans = {
        "closed_tasks": (retention.closed_tasks, CLOSED_TASKS_FLOOR, None),
        "receipts": (retention.receipts, RECEIPTS_FLOOR, RECEIPTS),
        "evidence": (retention.evidence, RECEIPTS_FLOOR, EVIDENCE),
        "memory": (retention.memory, RECEIPTS_FLOOR, None),
    }
    for name, (value, floor, cap) in spans.items():
        if value is None and name == "memory":
            continue
        if not isinstance(value, timedelta):
            found.append(f"its retention's {name} must be a timedelta, not {type(value).__name__}")
        elif value < floor:
            found.append(f"its retention's {name} {value} is under the floor of {floor}")
        elif cap is not None and value > cap:
            found.append(f"its retention's {name} {value} is over the runtime's TTL of {cap}")
    return found
