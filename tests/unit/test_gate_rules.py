"""The gate's own decisions, pure: what one wake does to one task, and when a wake is not trusted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given
from hypothesis import strategies as st
from refund_rules import APP, refund

from wakeful.authority.snapshot import Snapshot
from wakeful.consumers.gate import rules as gate_rules
from wakeful.consumers.gate.judge import told
from wakeful.consumers.gate.rules import Incompatible, Stranger
from wakeful.examples.refund import Stage
from wakeful.producers.signing import Ed25519Signer, sign_event
from wakeful.schemas import events
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.events import Envelope, SignedEvent
from wakeful.schemas.signatures import VerifyKey
from wakeful.sdk.workflow import Refuse
from wakeful.state.store import Keep
from wakeful.workflow import engine
from wakeful.workflow.stuck import STUCK_AFTER_S

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
AUTH = Snapshot(approvers=frozenset({"alice"}), limit=1000)
PRIVATE = Ed25519PrivateKey.generate()
SIGNER = Ed25519Signer("key-alice", PRIVATE)
KEY = VerifyKey(
    "key-alice", "ed25519", PRIVATE.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw), "alice"
)
KEEP = timedelta(days=8)  # the events topic's retention and a segment (core/topics.event_keep_s)
MAX_AGE = timedelta(minutes=5)


def task(amount: int = 2500, stage: Stage | None = None) -> Checkpoint:
    cp = refund.create("t-1", "svc", "default", {"amount": amount}, auth=AUTH, now=NOW)
    assert isinstance(cp, Checkpoint)
    return refund._with(cp, stage=stage) if stage else cp


def event(kind: str, payload: dict[str, Any] | None = None, **fields: Any) -> SignedEvent:
    return sign_event(SIGNER, kind, payload or {}, task_id=fields.pop("task_id", "t-1"), **fields)


def decide(cp: Checkpoint, ev: SignedEvent | None, who: str = "alice", **kw: Any) -> object:
    tenant, auth, now = kw.pop("tenant", "default"), kw.pop("auth", AUTH), kw.pop("now", NOW)
    out = gate_rules.decide(APP, cp, ev, who, tenant=tenant, auth=auth, now=now, **kw)
    return out.checkpoint if isinstance(out, engine.Moved) else out


# ---- decide --------------------------------------------------------------------------------------


@pytest.mark.parametrize("stage", [Stage.CLOSED, Stage.QUARANTINED])
@pytest.mark.parametrize(
    ("kind", "payload"),
    [
        (events.RUN, {}),
        (events.APPROVE, {"version": 1}),
        (events.AMEND, {"amount": 10}),
        (events.REOPEN, {}),
    ],
)
def test_event_for_a_finished_task_is_rejected_without_a_write_and_says_so(
    stage: Stage, kind: str, payload: dict[str, Any]
) -> None:
    out = decide(task(stage=stage), event(kind, payload), who="svc")
    assert out == Refuse(f"task is {stage}; it accepts no more events")


def test_finished_task_is_not_quarantined_for_a_policy_change_it_no_longer_runs_under() -> None:
    moved = Snapshot(approvers=AUTH.approvers, limit=1000, policy="refund-policy-9")
    assert isinstance(decide(task(stage=Stage.CLOSED), event(events.RUN), auth=moved), Refuse)


def test_deadline_wake_for_a_finished_task_does_nothing_visible() -> None:
    assert isinstance(decide(task(stage=Stage.CLOSED), None, now=NOW + timedelta(days=30)), Refuse)


@pytest.mark.parametrize(
    ("compat", "expect"),
    [
        ({"tool_catalog": "quarantine"}, "quarantine"),
        ({"tool_catalog": "pin"}, "catalog-old"),
        ({"tool_catalog": "migrate"}, APP.catalog),
    ],
)
def test_a_task_started_under_another_tool_catalog_follows_the_declared_rule(
    compat: dict[str, str], expect: str
) -> None:
    auth = Snapshot(approvers=AUTH.approvers, limit=1000, compat=compat)
    cp = task()
    cp = cp.model_copy(update={"versions": cp.versions.model_copy(update={"tool_catalog": "catalog-old"})})
    out = decide(cp, event(events.APPROVE, {"version": 1}), auth=auth)
    if expect == "quarantine":
        assert out == Incompatible(f"tool_catalog catalog-old -> {APP.catalog} (quarantine)")
    else:
        assert isinstance(out, Checkpoint) and out.versions.tool_catalog == expect


def test_accepted_approval_is_the_next_checkpoint() -> None:
    out = decide(task(), event(events.APPROVE, {"version": 1}))
    assert isinstance(out, Checkpoint) and out.stage == Stage.READY and out.business.approval is not None


def test_a_refused_event_writes_nothing_but_its_receipt() -> None:
    out = decide(task(), event(events.APPROVE, {"version": 1}), who="mallory")
    assert out == Refuse("not an authorised approver")


def test_amend_by_anyone_but_the_requester_is_refused() -> None:
    out = decide(task(), event(events.AMEND, {"amount": 5}), who="alice")
    assert isinstance(out, Refuse) and "may not send task.amend" in out.reason


def test_amend_once_the_refund_started_is_refused() -> None:
    cp = task(300, stage=Stage.READY)
    out = decide(
        cp, event(events.AMEND, {"amount": 5}), who="svc", started=frozenset({f"REFUND:{cp.task_id}:v1"})
    )
    assert isinstance(out, Refuse) and "could pay twice" in out.reason


def test_run_on_a_ready_task_writes_nothing() -> None:
    assert decide(task(300), event(events.RUN), who="svc") is None


def test_late_approval_is_refused_and_leaves_the_deadline_to_its_owner() -> None:
    late = NOW + refund.DEFAULT_WAIT + timedelta(seconds=1)
    out = decide(task(), event(events.APPROVE, {"version": 1}), now=late)
    assert isinstance(out, Refuse) and "has passed" in out.reason  # the task waits for its owner


def test_deadline_wake_escalates_only_when_due() -> None:
    assert decide(task(), None, now=NOW + timedelta(hours=1)) is None
    due = decide(task(), None, now=NOW + refund.DEFAULT_WAIT)
    assert isinstance(due, Checkpoint) and due.stage == Stage.NEEDS_REVIEW


def test_create_on_an_existing_task_is_refused() -> None:
    out = decide(task(), event(events.CREATE, {"amount": 1}), who="svc")
    assert out == Refuse("task.create does not apply to an existing task")


@pytest.mark.parametrize("stage", [None, Stage.CLOSED])
@pytest.mark.parametrize("kind", [events.RUN, events.APPROVE, events.AMEND, events.REOPEN, events.CREATE])
def test_an_event_of_another_tenant_finds_no_task_whatever_the_task_is(
    kind: str, stage: Stage | None
) -> None:
    out = decide(task(stage=stage), event(kind, {"version": 1}), who="svc", tenant="globex")
    assert out == Stranger()


def test_a_deadline_wake_has_no_tenant_to_be_a_stranger_to() -> None:
    due = decide(task(), None, now=NOW + refund.DEFAULT_WAIT, tenant="globex")
    assert isinstance(due, Checkpoint) and due.stage == Stage.NEEDS_REVIEW


def _review() -> engine.ForReview:
    cp = task()
    return engine.ForReview(engine.review(cp, "a person must look"), "a person must look")


@pytest.mark.parametrize(
    ("ruling", "writes"),
    [
        (engine.Moved(task(300), {}), True),
        (_review(), True),
        (Refuse("no"), False),
        (Stranger(), False),
        (Incompatible("policy p1 -> p2 (quarantine)"), False),
        (None, False),
    ],
)
def test_only_a_move_or_a_review_writes_the_task(ruling: gate_rules.WakeRuling, writes: bool) -> None:
    out = gate_rules.written(ruling)
    if writes:
        assert isinstance(ruling, engine.Moved | engine.ForReview) and out is ruling.checkpoint
    else:
        assert out == Keep()


# ---- misaddressed: a wake is only as good as the signed event inside it ---------------------------


def wake_for(ev: SignedEvent, **override: Any) -> Envelope:
    fields: dict[str, Any] = {
        "message_id": ev.event_id,
        "task_id": ev.task_id or "t-1",
        "task_version": 0,
        "kind": "wake",
        "created_at": NOW,
        "trace_id": ev.event_id,
        "payload": {"reason": "event", "judged_at": NOW.isoformat()},
    }
    return Envelope(**(fields | override))


def misaddressed(
    ev: SignedEvent,
    env: Envelope,
    kinds: frozenset[str] = frozenset({events.APPROVE}),
    tenant: str = "default",
    appended: datetime | None = NOW,
) -> Any:
    verified = KEY.verify(ev)
    return gate_rules.misaddressed(
        ev, env, verified, kinds, tenant=tenant, max_age=MAX_AGE, keep=KEEP, appended=appended
    )


def test_wake_carrying_a_genuine_fresh_event_for_its_task_is_trusted() -> None:
    ev = event(events.APPROVE, {"version": 1}, issued_at=NOW)
    assert misaddressed(ev, wake_for(ev)) is None


def test_wake_whose_event_was_edited_is_refused() -> None:
    ev = event(events.APPROVE, {"version": 1}, issued_at=NOW)
    edited = ev.model_copy(update={"payload": {"version": 2}})
    assert "does not verify" in misaddressed(edited, wake_for(edited))


def test_wake_that_readdresses_a_signed_event_to_another_task_is_refused() -> None:
    ev = event(events.APPROVE, {"version": 1}, issued_at=NOW)
    assert "signed for task t-1" in misaddressed(ev, wake_for(ev, task_id="t-2"))


@pytest.mark.parametrize(
    ("kind", "tenant", "task_id", "trusted"),
    [
        (events.CREATE, "globex", "globex.t-1", True),  # a tenant's own namespace
        (events.CREATE, "globex", "t-1", False),  # a create never lands outside it
        (events.CREATE, "globex", "acme.t-1", False),
        (events.CREATE, "default", "t-1", True),
        (events.APPROVE, "globex", "globex.t-1", True),
        (
            events.APPROVE,
            "globex",
            "t-1",
            True,
        ),  # a task made before the namespaces: the gate judges its tenant
        (events.APPROVE, "globex", "acme.t-1", False),  # never another tenant's namespace
        (events.APPROVE, "default", "globex.t-1", False),
    ],
)
def test_a_wake_may_carry_an_event_only_to_a_task_its_signers_tenant_names(
    kind: str, tenant: str, task_id: str, trusted: bool
) -> None:
    ev = event(kind, {"version": 1}, issued_at=NOW)
    refused = misaddressed(ev, wake_for(ev, task_id=task_id), frozenset({kind}), tenant)
    assert (refused is None) == trusted, refused


def test_wake_whose_message_id_is_not_its_events_id_is_refused() -> None:
    ev = event(events.APPROVE, {"version": 1}, issued_at=NOW)
    assert misaddressed(ev, wake_for(ev, message_id="close:REFUND:t-1:v1")) == (
        "wake message id does not match its event"
    )


def test_wake_carrying_a_kind_the_key_may_not_send_is_refused() -> None:
    ev = event(events.AMEND, {"amount": 1}, issued_at=NOW)
    assert misaddressed(ev, wake_for(ev)) == f"key key-alice may not send {events.AMEND}"


@given(age=st.integers(min_value=0, max_value=10 * 24 * 3600))
def test_wake_is_trusted_exactly_while_its_event_was_fresh_when_the_door_judged_it(age: int) -> None:
    ev = event(events.APPROVE, {"version": 1}, issued_at=NOW - timedelta(seconds=age))
    refused = misaddressed(ev, wake_for(ev))
    assert (refused is None) == (timedelta(seconds=age) <= MAX_AGE)


@given(lag=st.integers(min_value=-3600, max_value=20 * 24 * 3600))
def test_wake_is_trusted_exactly_while_its_verdict_is_one_the_door_could_give_before_its_append(
    lag: int,
) -> None:
    """The verdict (the event's own broker time) is no later than the wake's append, and no older than
    the door can still read an event: the door may have been down that long, nothing shorter."""
    judged = NOW - timedelta(seconds=lag)
    ev = event(events.APPROVE, {"version": 1}, issued_at=judged)
    refused = misaddressed(ev, wake_for(ev, payload={"reason": "event", "judged_at": judged.isoformat()}))
    assert (refused is None) == (-events.FUTURE_SKEW <= timedelta(seconds=lag) <= KEEP)


@given(age=st.integers(min_value=0, max_value=3650 * 24 * 3600))
def test_a_wake_replayed_from_the_held_list_is_not_held_to_a_broker_time(age: int) -> None:
    judged = NOW - timedelta(seconds=age)
    ev = event(events.APPROVE, {"version": 1}, issued_at=judged)
    payload = {"reason": "event", "judged_at": judged.isoformat()}
    assert misaddressed(ev, wake_for(ev, payload=payload), appended=None) is None


@pytest.mark.parametrize("judged", [None, "", "yesterday", 17])
def test_wake_without_the_doors_verdict_is_refused(judged: object) -> None:
    ev = event(events.APPROVE, {"version": 1}, issued_at=NOW)
    refused = misaddressed(ev, wake_for(ev, payload={"reason": "event", "judged_at": judged}))
    assert refused == "wake does not say when the door judged its event"


def test_wake_carrying_an_approval_that_names_neither_task_nor_wait_is_refused() -> None:
    # Refused at the door; wrapped in a wake for any task, it must not approve that task.
    signed = sign_event(SIGNER, events.APPROVE, {"version": 1}, issued_at=NOW)
    assert signed.task_id is None and signed.correlation_id is None
    refused = misaddressed(signed, wake_for(signed, task_id="t-9"))
    assert refused == "wake carries an approval that names neither its task nor its wait"


@pytest.mark.parametrize(
    ("tenant", "task_id", "task_named", "corr", "answer"),
    [
        ("default", "t-1", "t-1", None, ("task t-1: quarantined", "t-1")),  # its own: why
        ("globex", "globex.t-1", "t-1", None, ("task t-1: quarantined", "globex.t-1")),
        ("globex", "t-1", "t-1", None, ("no task globex.t-1", "globex.t-1")),  # reached another's
        ("globex", "t-1", None, "corr-1", ("unknown correlation id 'corr-1'", "")),
    ],
)
def test_an_unreadable_task_is_explained_only_to_a_sender_of_its_own_namespace(
    tenant: str, task_id: str, task_named: str | None, corr: str | None, answer: tuple[str, str]
) -> None:
    ev = event(events.RUN, task_id=task_named, correlation_id=corr)
    assert told(ev, tenant, task_id, "task t-1: quarantined") == answer
    assert told(None, tenant, task_id, "why") == ("why", task_id)  # a deadline wake: nobody to tell


def lost_wait(stage: Stage) -> Checkpoint:
    """A task at `stage` whose wait was lost: nothing pending, last changed at NOW."""
    cp = task(stage=stage)
    return cp.model_copy(update={"execution": cp.execution.model_copy(update={"pending_waits": ()})})


@pytest.mark.parametrize(
    ("stage", "after", "parked"),
    [
        (Stage.AWAITING_APPROVAL, timedelta(seconds=STUCK_AFTER_S), True),  # no tool, no wait: a person
        (Stage.AWAITING_APPROVAL, timedelta(seconds=STUCK_AFTER_S - 1), False),  # not stuck yet
        (Stage.READY, timedelta(hours=5), False),  # a tool: the follow-up asks for a proposal
    ],
)
def test_a_deadline_wake_parks_for_review_a_task_nothing_else_can_move(
    stage: Stage, after: timedelta, parked: bool
) -> None:
    out = decide(lost_wait(stage), None, now=NOW + after)
    if parked:
        assert isinstance(out, engine.ForReview) and out.checkpoint.stage == Stage.NEEDS_REVIEW
        assert "offers no tool and waits for nothing" in out.reason, out.reason
    else:
        assert out is None


def test_a_deadline_wake_leaves_a_task_that_still_waits_to_its_deadline() -> None:
    assert decide(task(), None, now=NOW + timedelta(seconds=STUCK_AFTER_S + 1)) is None
