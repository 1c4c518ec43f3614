"""The refund's decisions, one function per event, as the runtime makes them with the refund app:
the function-per-event surface the refund had before it was an app on the SDK, kept for the tables
that pin its behaviour (test_refund_rules, test_gate_rules)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from wakeful.authority.snapshot import Snapshot
from wakeful.examples import refund as refund_app
from wakeful.examples.refund import Stage
from wakeful.schemas import events
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk import Effect, Refuse, Review, Start
from wakeful.workflow import effects, engine, wakes

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
AUTH = Snapshot(approvers=frozenset({"alice", "bob"}), limit=1000)

APP = refund_app.app


@dataclass(frozen=True)
class Declined:
    """The event does not move the task on: refused (Refuse), or the task sent for review (Review)."""

    reason: str
    review: bool = False


def _plain(out: object) -> Checkpoint | Declined | None:
    if isinstance(out, engine.Moved):
        return out.checkpoint
    if isinstance(out, engine.ForReview):
        return Declined(out.reason, review=True)
    if isinstance(out, Refuse):
        return Declined(out.reason)
    assert out is None or isinstance(out, Checkpoint), out
    return out


class Rules:
    """The refund's decisions, one function per event, as the gate and executor make them."""

    MAX_AMOUNT, DEFAULT_WAIT, MAX_WAIT = refund_app.MAX_AMOUNT, refund_app.DEFAULT_WAIT, refund_app.MAX_WAIT
    TOOL, SCOPE, APPROVAL_TTL = "refund", "refund.execute", wakes.APPROVAL_TTL
    terms, review, wait_window = (
        staticmethod(engine.terms),
        staticmethod(engine.review),
        staticmethod(refund_app.wait_window),
    )

    @staticmethod
    def create(
        task_id: str, who: str, tenant: str, payload: dict[str, Any], *, auth: Snapshot, now: datetime
    ) -> Checkpoint | Declined | None:
        return _plain(engine.create(APP, "refund", Start(task_id, who, tenant, payload, auth, now)))

    @staticmethod
    def approve(  # noqa: PLR0917  (the call shape the tables were written in)
        cp: Checkpoint,
        who: str,
        version: object,
        auth: Snapshot,
        now: datetime,
        correlation_id: str | None = None,
    ) -> Checkpoint | Declined | None:
        heard = wakes.Heard(events.APPROVE, {"version": version}, who, correlation_id)
        return _plain(wakes.on_event(APP, cp, heard, auth=auth, now=now))

    @staticmethod
    def amend(  # noqa: PLR0917  (the call shape the tables were written in)
        cp: Checkpoint,
        who: str,
        payload: dict[str, Any],
        auth: Snapshot,
        now: datetime,
        started: frozenset[str] = frozenset(),
    ) -> Checkpoint | Declined | None:
        heard = wakes.Heard(events.AMEND, payload, who)
        return _plain(wakes.on_event(APP, cp, heard, auth=auth, now=now, started=started))

    @staticmethod
    def reopen(
        cp: Checkpoint, payload: dict[str, Any], auth: Snapshot, now: datetime
    ) -> Checkpoint | Declined | None:
        return _plain(wakes.on_event(APP, cp, wakes.Heard(events.REOPEN, payload, "ops"), auth=auth, now=now))

    @staticmethod
    def run(cp: Checkpoint) -> Declined | None:
        out = _plain(wakes.run(APP, cp))
        assert not isinstance(out, Checkpoint)
        return out

    @staticmethod
    def deadline(cp: Checkpoint, now: datetime) -> Checkpoint | None:
        return wakes.on_deadline(APP, cp, now)

    @staticmethod
    def check_proposal(
        cp: Checkpoint, tool: str, args: dict[str, Any], auth: Snapshot, now: datetime
    ) -> Declined | None:
        out = effects.check_proposal(APP, cp, tool, args, auth=auth, now=now)
        if isinstance(out, Effect):
            return None
        return Declined(out.reason, review=isinstance(out, Review))

    @staticmethod
    def close(cp: Checkpoint, entry: str) -> Checkpoint:
        return effects.done(APP, cp, "refund", {"ledger_entry": entry}, auth=AUTH, now=NOW)

    @staticmethod
    def _with(cp: Checkpoint, **business: Any) -> Checkpoint:
        """The task with these business fields; a stage other than awaiting_approval has no wait."""
        cp = cp.model_copy(update={"business": cp.business.model_copy(update=business)})
        if cp.stage != Stage.AWAITING_APPROVAL:
            cp = cp.model_copy(update={"execution": cp.execution.model_copy(update={"pending_waits": ()})})
        return cp


refund = Rules
