"""The refund workflow: every decision as a pure function of (checkpoint, input, authority, now).

received -> awaiting_approval | ready -> closed; plus needs_review and quarantined. A refund above
the live limit needs an approval bound to the task version and the digest of its terms; an
amendment bumps the version and voids the approval.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from wakeful.authority.policy import authorize
from wakeful.authority.store import Snapshot
from wakeful.schemas.approval import Approval, terms_digest
from wakeful.schemas.base import cut
from wakeful.schemas.checkpoint import BusinessState, Checkpoint, PendingWait, SecurityScope, VersionStamps
from wakeful.schemas.stage import Stage

APPROVAL_TTL = timedelta(hours=24)
DEFAULT_WAIT = timedelta(hours=24)
MAX_WAIT = timedelta(days=7)
ESCALATE_TO = "ops-lead"
APPROVERS_REF = "role:approver"  # resolved live against Authority at every resume
AGENT_ID = "refund-agent"
TOOL = "refund"
SCOPE = "refund.execute"  # the one action a refund approval permits
MAX_ATTEMPTS = 3
# Minor units. No refund comes near it, and every sum of amounts stays exact in 64 bits (the
# ledger's counters and the stored checkpoint's integers).
MAX_AMOUNT = 10**15


@dataclass(frozen=True)
class Refusal:
    """The input is refused; the reason is recorded. review=True also parks the task for a person."""

    reason: str
    review: bool = False


def op_key(cp: Checkpoint, version: int | None = None) -> str:
    """The business operation and version; never a per-attempt value (DESIGN section 6)."""
    return f"REFUND:{cp.task_id}:v{cp.business.version if version is None else version}"


def terms(cp: Checkpoint) -> str:
    b = cp.business
    return terms_digest(task=cp.task_id, amount=b.amount, currency=b.currency, version=b.version)


def needs_approval(cp: Checkpoint, auth: Snapshot) -> bool:
    return cp.business.amount > auth.limit


def requester(cp: Checkpoint) -> str:
    return cp.security.principal_ref.removeprefix("principal:")


def _resource(cp: Checkpoint, **more: Any) -> dict[str, Any]:
    return {"task": cp.task_id, "tenant": cp.security.tenant, "requester": requester(cp), **more}


def _wait(cp: Checkpoint, version: int, now: datetime, window: timedelta) -> PendingWait:
    cid = hashlib.sha256(f"{cp.task_id}:v{version}".encode()).hexdigest()[:20]
    return PendingWait(
        wait_for="approval",
        correlation_id=f"corr-{cid}",
        bound_to_version=version,
        allowed_signers=(APPROVERS_REF,),
        deadline=now + window,
        on_deadline=f"escalate:{ESCALATE_TO}",
    )


def _with(cp: Checkpoint, **business: Any) -> Checkpoint:
    return cp.model_copy(update={"business": cp.business.model_copy(update=business)})


def _settle(cp: Checkpoint, auth: Snapshot, now: datetime, window: timedelta) -> Checkpoint:
    """Route to awaiting_approval (with a wait) or ready, by the live limit."""
    if needs_approval(cp, auth):
        wait = _wait(cp, cp.business.version, now, window)
        cp = cp.model_copy(update={"execution": cp.execution.model_copy(update={"pending_waits": (wait,)})})
        return _with(cp, stage=Stage.AWAITING_APPROVAL)
    cp = cp.model_copy(update={"execution": cp.execution.model_copy(update={"pending_waits": ()})})
    return _with(cp, stage=Stage.READY)


def wait_window(payload: dict[str, Any]) -> timedelta:
    seconds = payload.get("wait_s")
    if isinstance(seconds, int) and not isinstance(seconds, bool) and seconds > 0:
        return timedelta(
            seconds=min(seconds, int(MAX_WAIT.total_seconds()))
        )  # clamped before it can overflow
    return DEFAULT_WAIT


def refund_amount(amount: Any) -> int | Refusal:
    """`amount` (minor units, from an event) if it is one a refund may carry, else why not."""
    if isinstance(amount, int) and not isinstance(amount, bool) and 0 < amount <= MAX_AMOUNT:
        return amount
    big = isinstance(amount, int) and amount.bit_length() > 64  # its digits may be too many to print
    shown = f"an integer of {amount.bit_length()} bits" if big else cut(repr(amount), 40)
    return Refusal(f"amount must be a whole number from 1 to {MAX_AMOUNT}, got {shown}")


def create(
    task_id: str, principal: str, tenant: str, payload: dict[str, Any], *, auth: Snapshot, now: datetime
) -> Checkpoint | Refusal:
    amount, currency = refund_amount(payload.get("amount")), payload.get("currency", "EUR")
    if isinstance(amount, Refusal):
        return amount
    if not isinstance(currency, str) or len(currency) != 3:
        return Refusal(f"currency must be a 3-letter code, got {currency!r}")
    cp = Checkpoint(
        task_id=task_id,
        business=BusinessState(stage=Stage.RECEIVED, amount=amount, currency=currency.upper()),
        security=SecurityScope(tenant=tenant, principal_ref=f"principal:{principal}"),
        versions=VersionStamps(
            policy=auth.policy, tool_catalog=auth.tool_catalog, agent_id=AGENT_ID, state_version=0
        ),
        updated_at=now,
    )
    if payload.get("note"):
        cp = _with(cp, note_ref=f"evidence:{task_id}:note")
    return _settle(cp, auth, now, wait_window(payload))


def approve(
    cp: Checkpoint,
    principal: str,
    version: Any,
    auth: Snapshot,
    now: datetime,
    *,
    correlation_id: str | None = None,
) -> Checkpoint | Refusal:
    if cp.stage is not Stage.AWAITING_APPROVAL:
        return Refusal(f"task is {cp.stage.value}, not awaiting an approval")
    decision = authorize(principal, "approve", _resource(cp), auth)
    if not decision.allowed:
        return Refusal(decision.reason)
    if not isinstance(version, int) or isinstance(version, bool):  # true is not version 1
        return Refusal(f"an approval names its task version as a whole number, got {version!r}")
    if version != cp.business.version:
        return Refusal(f"approval is for version {version}, task is now version {cp.business.version}")
    wait = next((w for w in cp.execution.pending_waits if w.wait_for == "approval"), None)
    if wait is None or wait.bound_to_version != cp.business.version:
        return Refusal("no approval is pending for this version")
    if correlation_id is not None and correlation_id != wait.correlation_id:
        return Refusal("the approval answers another wait (correlation id mismatch)")
    if now >= wait.deadline:  # the deadline's owner decides now, not a late approver
        return Refusal(
            f"the approval wait's deadline {wait.deadline.isoformat()} has passed; "
            f"it is now for its owner ({wait.on_deadline})"
        )
    approval = Approval(
        object="refund",
        object_version=cp.business.version,
        object_digest=terms(cp),
        approver_ref=principal,
        scope=SCOPE,
        expires_at=now + APPROVAL_TTL,
    )
    cp = cp.model_copy(update={"execution": cp.execution.model_copy(update={"pending_waits": ()})})
    return _with(cp, stage=Stage.READY, approval=approval, last_refusal=None)


def amend(
    cp: Checkpoint,
    principal: str,
    payload: dict[str, Any],
    auth: Snapshot,
    now: datetime,
    *,
    started: frozenset[str] = frozenset(),
) -> Checkpoint | Refusal:
    """Only the requester may amend, and never once the current version's refund has started
    (started: op keys with an intent that did not fail; money may have moved)."""
    if cp.stage in (Stage.CLOSED, Stage.QUARANTINED):
        return Refusal(f"task is {cp.stage.value}; it cannot be amended")
    if principal != requester(cp):
        return Refusal(f"{principal} did not request this refund and may not amend it")
    if op_key(cp) in started:
        return Refusal(
            f"the refund for version {cp.business.version} has started; amending now could pay twice"
        )
    amount = refund_amount(payload.get("amount"))
    if isinstance(amount, Refusal):
        return amount
    # A changed request is a different operation: new version, and any approval is void.
    cp = _with(cp, amount=amount, version=cp.business.version + 1, approval=None, last_refusal=None)
    return _settle(cp, auth, now, wait_window(payload))


def reopen(cp: Checkpoint, payload: dict[str, Any], auth: Snapshot, now: datetime) -> Checkpoint | Refusal:
    """A person settles a task parked for review: back to waiting for approval, or ready."""
    if cp.stage is not Stage.NEEDS_REVIEW:
        return Refusal(f"task is {cp.stage.value}; only a task in needs_review can be reopened")
    return _settle(_with(cp, last_refusal=None), auth, now, wait_window(payload))


def run(cp: Checkpoint) -> Refusal | None:
    """A nudge to run now: fine when ready, refused otherwise."""
    if cp.stage is Stage.READY:
        return None
    if cp.stage is Stage.AWAITING_APPROVAL:
        return Refusal(f"needs an approval for version {cp.business.version} before it can run")
    return Refusal(f"task is {cp.stage.value}; it cannot run")


def deadline(cp: Checkpoint, now: datetime) -> Checkpoint | None:
    """Apply on_deadline if a pending wait's deadline has really passed; None otherwise."""
    due = [w for w in cp.execution.pending_waits if w.deadline <= now]
    if cp.stage is not Stage.AWAITING_APPROVAL or not due:
        return None
    wait = due[0]
    action, _, owner = wait.on_deadline.partition(":")
    cp = cp.model_copy(update={"execution": cp.execution.model_copy(update={"pending_waits": ()})})
    if action == "expire":
        return _with(
            cp, stage=Stage.CLOSED, last_refusal=f"expired: no approval by {wait.deadline.isoformat()}"
        )
    return _with(
        cp,
        stage=Stage.NEEDS_REVIEW,
        last_refusal=f"approval deadline {wait.deadline.isoformat()} passed; "
        f"escalated to {owner or ESCALATE_TO}",
    )


def check_proposal(
    cp: Checkpoint, tool: str, args: dict[str, Any], auth: Snapshot, now: datetime
) -> Refusal | None:
    """Gate 7: the proposal against Progress and live Authority. None means execute."""
    b = cp.business
    if cp.stage is Stage.AWAITING_APPROVAL:
        return Refusal(f"a refund of {b.amount} needs an approval for version {b.version} first")
    if cp.stage is not Stage.READY:
        return Refusal(f"task is {cp.stage.value}; nothing may run")
    if tool not in {t.name for t in auth.tools_at(cp.stage.value)}:
        return Refusal(f"tool {tool!r} is not permitted at stage {cp.stage.value}", review=True)
    if (
        args.get("amount") != b.amount
        or args.get("currency") != b.currency
        or args.get("task_id") != cp.task_id
    ):
        return Refusal(
            f"proposed refund of {args.get('amount')!r} {args.get('currency')!r} does not match the system "
            f"of record ({b.amount} {b.currency})",
            review=True,
        )
    approval = b.approval
    if needs_approval(cp, auth):
        if approval is None:
            return Refusal(f"a refund of {b.amount} needs an approval (limit {auth.limit})", review=True)
        if not approval.binds(b.version, terms(cp)):
            return Refusal(
                f"approval is for version {approval.object_version}, task is now version {b.version}",
                review=True,
            )
        if approval.scope != SCOPE:
            return Refusal(f"the approval is for {approval.scope!r}, not {SCOPE!r}", review=True)
        if approval.expired(now):
            return Refusal("the approval has expired", review=True)
        if approval.single_use and approval.consumed:
            return Refusal("the single-use approval was already used", review=True)
    decision = authorize(
        approval.approver_ref if approval else requester(cp),
        "refund",
        _resource(cp, amount=b.amount, approver=approval.approver_ref if approval else None),
        auth,
    )
    if not decision.allowed:
        return Refusal(decision.reason, review=True)
    return None


def close(cp: Checkpoint, ledger_entry: str) -> Checkpoint:
    approval = cp.business.approval
    if approval is not None:
        approval = approval.model_copy(update={"consumed": True})
    cp = cp.model_copy(update={"external_refs": {**cp.external_refs, "ledger_entry": ledger_entry}})
    return _with(cp, stage=Stage.CLOSED, approval=approval, last_refusal=None)


def review(cp: Checkpoint, reason: str) -> Checkpoint:
    return _with(cp, stage=Stage.NEEDS_REVIEW, last_refusal=reason)


def refused(cp: Checkpoint, reason: str) -> Checkpoint:
    """Record a refusal without moving the task."""
    return _with(cp, last_refusal=reason)
