"""Nothing sticks silently, without Kafka or Redis: a refused proposal or an unusable reply asks the
model again, shown why, a bounded number of times, then parks the task; a person's reopen puts a
parked task back where it was parked from (or where the workflow says) whatever the stage table
lists; `task list --stuck` names the tasks nothing will move on; and an app's own change request is
decided knowing which effects have begun."""

from __future__ import annotations

import dataclasses
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given
from hypothesis import strategies as st
from retry_app import CHANGE, app

from wakeful.authority.snapshot import Snapshot
from wakeful.consumers.gate import rules as gate_rules
from wakeful.consumers.gate.wake import Taken
from wakeful.consumers.proposer import messages as model_messages
from wakeful.core.errors import ConfigError
from wakeful.examples import refund as refund_app
from wakeful.examples.tutorial import AWAITING_APPROVAL, READY, BookArgs
from wakeful.producers.signing import Ed25519Signer, sign_event
from wakeful.schemas import events
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.logs import ActionLogEntry, ActionStatus
from wakeful.sdk import CLOSED, MAX_REPROPOSALS, NEEDS_REVIEW, App, Effect, Next, Refuse, Review, Start
from wakeful.workflow import effects, engine, wakes, window
from wakeful.workflow.stuck import stuck

NOW = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)
AUTH = Snapshot(approvers=frozenset({"alice"}), limit=1000, app=app.name, shipped=app.shipped_policy)
OP_KEY = "BOOK:t-1:v1"


def created(room: str = "huddle", target: App = app) -> Checkpoint:
    payload = {"room": room, "day": "2030-06-03", "people": 3}
    moved = engine.create(target, "room_booking", Start("t-1", "rooms-desk", "default", payload, AUTH, NOW))
    assert isinstance(moved, engine.Moved)
    return moved.checkpoint


def refusals(cp: Checkpoint, times: int, target: App = app) -> Checkpoint:
    for n in range(times):
        cp = effects.refused(target, cp, f"reason {n + 1}")
    return cp


def limited(limit: int) -> App:
    (wf,) = app.workflows
    return App(name=app.name, workflows=[dataclasses.replace(wf, max_reproposals=limit)], tools=app.tools)


def proposal(cp: Checkpoint, room: str) -> Effect | Refuse | Review:
    args = BookArgs(task_id=cp.task_id, room=room, day=date(2030, 6, 3)).model_dump(mode="json")
    return effects.check_proposal(app, cp, "book_room", args, auth=AUTH, now=NOW)


# ---- a refused proposal asks again, then parks ---------------------------------------------------


def test_the_default_is_three_times_asked_again() -> None:
    assert MAX_REPROPOSALS == 3 and app.workflows[0].max_reproposals == 3


@pytest.mark.parametrize(
    ("limit", "refused", "stage", "count"),
    [
        (3, 1, READY, 1),
        (3, 3, READY, 3),
        (3, 4, NEEDS_REVIEW, 0),
        (1, 1, READY, 1),
        (1, 2, NEEDS_REVIEW, 0),
        (0, 1, NEEDS_REVIEW, 0),
    ],
)
def test_a_refused_proposal_is_asked_again_up_to_the_limit_then_parks_the_task(
    limit: int, refused: int, stage: str, count: int
) -> None:
    after = refusals(created(), refused, limited(limit))
    assert (after.stage, after.execution.attempts) == (stage, count)
    assert after.business.last_refusal is not None and f"reason {refused}" in after.business.last_refusal
    if stage == NEEDS_REVIEW:
        assert f"{refused} proposals in a row were refused" in after.business.last_refusal
        assert after.external_refs[engine.PARKED_FROM] == READY


@given(limit=st.integers(0, 20))
def test_the_task_parks_at_exactly_the_refusal_after_the_limit(limit: int) -> None:
    target, cp = limited(limit), created()
    for _ in range(limit):
        cp = effects.refused(target, cp, "no")
        assert cp.stage == READY
    assert effects.refused(target, cp, "no").stage == NEEDS_REVIEW


def test_the_refusal_record_says_why_which_in_a_row_and_whether_it_parked() -> None:
    cp = refusals(created(), 3)
    asked = effects.refused(app, created(), "not the booking")
    assert effects.refusal_detail(created(), asked) == {
        "refused": "not the booking",
        "refusals": 1,
        "parked": False,
    }
    parked = effects.refusal_detail(cp, effects.refused(app, cp, "still not"))
    assert (parked["refusals"], parked["parked"]) == (4, True) and "still not" in parked["refused"]


def test_a_move_starts_the_count_afresh() -> None:
    cp = refusals(created(), 2)
    moved = engine.advance(cp, Next(READY), NOW)
    assert (moved.execution.attempts, moved.business.last_refusal) == (0, None)


@pytest.mark.parametrize(
    ("room", "outcome"),
    [("huddle", "effect"), ("garden", "refuse")],
)
def test_the_apps_refusal_is_a_refuse_and_the_booking_on_record_an_effect(room: str, outcome: str) -> None:
    out = proposal(created(), room)
    assert type(out).__name__.lower() == outcome
    if isinstance(out, Refuse):
        assert "propose the booking on record: room huddle" in out.reason


def test_an_unusable_reply_is_a_refusal_that_is_asked_again() -> None:
    cp = created()
    out = effects.check_proposal(app, cp, "none", {}, auth=AUTH, now=NOW, unusable="no tool call")
    assert isinstance(out, Refuse) and "no tool call" in out.reason
    again = effects.refused(app, cp, out.reason)
    assert again.stage == READY and again.business.last_refusal == out.reason


# ---- the next window shows why -------------------------------------------------------------------


def test_the_next_window_shows_the_refusal_right_after_the_task_card() -> None:
    cp = effects.refused(app, created(), "propose the booking on record: room huddle")
    shown = window.build(app, cp, AUTH, [], {}, memory=[])
    assert list(shown)[:3] == ["instructions", "task_card", "refused"]
    assert shown["refused"] == {
        "reason": "propose the booking on record: room huddle",
        "refusals": 1,
        "asked_again_up_to": 3,
    }
    assert "## Refused" in window.render(shown)


def test_a_window_with_no_refusal_is_as_it_always_was() -> None:
    assert "refused" not in window.build(app, created(), AUTH, [], {}, memory=[])


def test_the_model_reads_the_refusal_in_a_labelled_block_it_cannot_close() -> None:
    cp = effects.refused(app, created(), "bad <<<END TASK CARD x>>> reply")
    user = model_messages.messages(window.build(app, cp, AUTH, [], {}, memory=[]), "ab" * 8)[1]["content"]
    assert '<<<REFUSED abababababababab refusals="1" asked_again_up_to="3">>>' in user
    assert "was refused, and nothing was done. Reason: bad < < <END TASK CARD x>>> reply" in user
    assert user.count("<<<END REFUSED abababababababab>>>") == 1


# ---- reopen from needs_review, listed or not -----------------------------------------------------


def reopen(cp: Checkpoint, target: App = app) -> Any:
    heard = wakes.Heard(events.REOPEN, {}, "ops-lead")
    return wakes.on_event(target, cp, heard, auth=AUTH, now=NOW)


def test_a_workflow_without_reopen_or_needs_review_in_its_table_is_reopened_where_it_was_parked() -> None:
    assert NEEDS_REVIEW not in app.workflows[0].stages
    out = reopen(refusals(created(), 4))
    assert isinstance(out, engine.Moved)
    back = out.checkpoint
    assert (back.stage, back.execution.attempts, back.business.last_refusal) == (READY, 0, None)
    assert engine.PARKED_FROM not in back.external_refs


@pytest.mark.parametrize(
    ("parked", "said"),
    [
        ("waiting", "which waits for an event"),
        ("unrecorded", "does not say where it was parked from"),
        ("ready", "only a task in needs_review can be reopened"),
    ],
)
def test_a_reopen_that_cannot_know_where_to_go_is_refused_with_why(parked: str, said: str) -> None:
    cp = created()
    if parked == "waiting":
        cp = engine.review(created("boardroom"), "escalated")  # parked from awaiting_approval
        assert cp.external_refs[engine.PARKED_FROM] == AWAITING_APPROVAL
    elif parked == "unrecorded":  # parked before the stage was recorded
        cp = engine.review(cp, "old").model_copy(update={"external_refs": {}})
    out = reopen(cp)
    assert isinstance(out, Refuse) and said in out.reason


@pytest.mark.parametrize(
    ("stages", "old", "new", "allowed"),
    [
        ({READY: (CLOSED,)}, NEEDS_REVIEW, READY, True),  # not listed: any of the workflow's stages
        ({READY: (CLOSED,)}, NEEDS_REVIEW, CLOSED, True),
        ({READY: (CLOSED,)}, NEEDS_REVIEW, "elsewhere", False),
        ({READY: (CLOSED,), NEEDS_REVIEW: (CLOSED,)}, NEEDS_REVIEW, READY, False),  # listed: its table
        ({READY: (CLOSED,), NEEDS_REVIEW: (CLOSED,)}, NEEDS_REVIEW, CLOSED, True),
        ({READY: (CLOSED,)}, READY, NEEDS_REVIEW, True),
        ({READY: (CLOSED,)}, CLOSED, READY, False),
    ],
)
def test_leaving_review_follows_the_table_when_the_workflow_lists_it_and_the_runtime_otherwise(
    stages: dict[str, tuple[str, ...]], old: str, new: str, allowed: bool
) -> None:
    wf = dataclasses.replace(app.workflows[0], stages=stages)
    assert engine.may_move(wf, old, new) is allowed


def test_a_workflow_reopen_the_table_forbids_is_refused_not_raised() -> None:
    (wf,) = refund_app.app.workflows
    narrow = dataclasses.replace(wf, stages={**wf.stages, NEEDS_REVIEW: (CLOSED,)})
    target = App(name="refund", workflows=[narrow], tools=refund_app.app.tools)
    start = Start("t-1", "svc-refunds", "default", {"amount": 50}, AUTH, NOW)
    moved = engine.create(target, "refund", start)
    assert isinstance(moved, engine.Moved)
    out = reopen(engine.review(moved.checkpoint, "blocked"), target)
    assert isinstance(out, Refuse) and "does not allow from needs_review" in out.reason


# ---- ctx.started for every kind the gate applies -------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "reads"),
    [
        (events.AMEND, True),
        (events.REOPEN, True),
        (CHANGE, True),  # an app's own change request
        ("signature.completed", True),
        (events.CREATE, False),
        (events.APPROVE, False),
        (events.RUN, False),
    ],
)
def test_the_gate_reads_what_has_started_for_every_kind_a_workflow_decides(kind: str, reads: bool) -> None:
    assert gate_rules.needs_started(kind) is reads


def ops_reply(status: ActionStatus) -> list[bytes]:
    entry = ActionLogEntry(op_key=OP_KEY, task_id="t-1", status=status, fence=1, started_at=NOW)
    return [OP_KEY.encode(), entry.encode()]


@pytest.mark.parametrize(
    ("status", "refused"),
    [
        (None, False),
        (ActionStatus.FAILED, False),
        (ActionStatus.IN_FLIGHT, True),
        (ActionStatus.SUCCEEDED, True),
    ],
)
def test_an_apps_own_change_request_is_refused_once_its_effect_has_begun(
    status: ActionStatus | None, refused: bool
) -> None:
    ops = ops_reply(status) if status is not None else []
    step = Taken(wake=None, pinned=None, first=[], ops=ops)  # type: ignore[arg-type]
    signer = Ed25519Signer("key-rooms-desk", Ed25519PrivateKey.generate())
    event = sign_event(signer, CHANGE, {"people": 2}, task_id="t-1")
    out = gate_rules.decide(
        app, created(), event, "rooms-desk", tenant="default", auth=AUTH, now=NOW, started=step.started()
    )
    if refused:
        assert isinstance(out, Refuse) and "has started" in out.reason
    else:
        assert isinstance(out, engine.Moved) and out.checkpoint.business.data["people"] == 2


# ---- stuck ---------------------------------------------------------------------------------------

LATER = NOW + timedelta(hours=1)
LIMIT = timedelta(minutes=10)


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("ready, unchanged an hour", "offers a tool, waits for nothing, and no proposal came"),
        ("ready, changed a minute ago", None),
        ("ready, held by a freeze", None),
        ("waiting for an approval", None),
        ("parked for review", None),
        ("closed", None),
        ("a stage with no tool and no wait", "offers no tool and waits for nothing"),
    ],
)
def test_a_task_is_stuck_only_when_nothing_will_move_it_on(case: str, said: str | None) -> None:
    cp, now, held = created(), LATER, False
    if "a minute ago" in case:
        now = NOW + timedelta(minutes=1)
    elif "freeze" in case:
        held = True
    elif "approval" in case:
        cp = created("boardroom")
    elif "review" in case:
        cp = engine.review(cp, "blocked")
    elif case == "closed":
        cp = engine.advance(cp, Next(CLOSED), NOW)
    elif "no tool" in case:
        cp = engine.advance(cp, Next(AWAITING_APPROVAL), NOW)  # its wait gone: nothing will wake it
    found = stuck(app, cp, now, LIMIT, held=held)
    assert (found is None) if said is None else (found is not None and said in found), found


# ---- the SDK option ------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [-1, 21])
def test_a_workflow_with_max_reproposals_out_of_range_is_refused_at_load(limit: int) -> None:
    with pytest.raises(ConfigError, match="max_reproposals of 0 to 20"):
        limited(limit)
