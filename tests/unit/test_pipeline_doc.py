"""docs/pipeline.md held to the code: its tables of `task show --json` name every field the object
has (top level, and inside the approval, each wait, the version stamps and each action) and no
other; and the executor takes a proposal at any stage that offers a tool, drops one its task moved
on from, and dead-letters the rest, as the page says."""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from wakeful.authority.snapshot import Snapshot
from wakeful.consumers.executor import steps as executor_steps
from wakeful.examples import support, tutorial
from wakeful.operate import client
from wakeful.schemas import events
from wakeful.schemas.approval import Approval
from wakeful.schemas.checkpoint import Checkpoint, PendingWait, VersionStamps
from wakeful.schemas.events import Envelope
from wakeful.schemas.logs import ActionLogEntry, ActionStatus
from wakeful.sdk import App, Start
from wakeful.workflow import engine, wakes

pytestmark = pytest.mark.timeout(30)

PAGE = (Path(__file__).resolve().parents[2] / "docs/pipeline.md").read_text()
SECTION = PAGE.split("### `task show --json`, field by field", 1)[1].split("\n## ", 1)[0]
NOW = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)


def auth(app: App) -> Snapshot:
    return Snapshot(approvers=frozenset({"alice"}), limit=1000, app=app.name, shipped=app.shipped_policy)


def created(app: App, workflow: str, payload: dict[str, object]) -> Checkpoint:
    moved = engine.create(app, workflow, Start("t-1", "rooms-desk", "default", payload, auth(app), NOW))
    assert isinstance(moved, engine.Moved), moved
    return moved.checkpoint


def approved_booking() -> Checkpoint:
    """A boardroom booking approved by alice: a checkpoint with an approval, before its tool ran."""
    cp = created(tutorial.app, "room_booking", {"room": "boardroom", "day": "2030-06-03", "people": 3})
    heard = wakes.Heard(events.APPROVE, {"version": 1}, "alice", cp.execution.pending_waits[0].correlation_id)
    moved = wakes.on_event(tutorial.app, cp, heard, auth=auth(tutorial.app), now=NOW)
    assert isinstance(moved, engine.Moved), moved
    return moved.checkpoint


def page_fields(table: int) -> set[str]:
    """The backticked names in the first column of the section's `table`th table (0: top level)."""
    tables = re.findall(r"((?:^\|.*\n)+)", SECTION, re.MULTILINE)
    names: set[str] = set()
    for line in tables[table].splitlines()[2:]:
        names |= set(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return names


def show_adds() -> set[str]:
    """The keys Client.show() adds to describe() in its dict literals (it reads Redis: read, not run)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(client.Client.show)))
    return {
        key.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Dict)
        for key in node.keys
        if isinstance(key, ast.Constant) and isinstance(key.value, str)
    }


def test_the_top_level_table_names_every_field_task_show_prints() -> None:
    cp = approved_booking()
    built = set(client.describe(cp)) - set(cp.business.data)  # the app's own fields: one row for all
    assert {"actions", "effects", "model_tokens", "quarantine", "parked_at"} <= show_adds()
    assert page_fields(0) == built | show_adds()


@pytest.mark.parametrize(
    ("prefix", "dumped"),
    [
        ("approval.", lambda cp: client.describe(cp)["approval"]),
        (
            "pending_waits[].",
            lambda cp: client.describe(
                created(tutorial.app, "room_booking", {"room": "boardroom", "day": "2030-06-03", "people": 3})
            )["pending_waits"][0],
        ),
        ("versions.", lambda cp: client.describe(cp)["versions"]),
        (
            "actions.<op>.",
            lambda cp: ActionLogEntry(
                op_key="BOOK:t-1:v1", task_id="t-1", status=ActionStatus.SUCCEEDED, fence=1, started_at=NOW
            ).model_dump(mode="json"),
        ),
    ],
    ids=["approval", "pending_waits", "versions", "actions"],
)
def test_the_nested_table_names_every_field_of_each_object(prefix: str, dumped: object) -> None:
    assert callable(dumped)
    shown = {name.removeprefix(prefix) for name in page_fields(1) if name.startswith(prefix)}
    assert shown == set(dumped(approved_booking()))


def test_the_nested_fields_are_the_stored_models_fields() -> None:
    """The dumps above are the models' own: a field added to one shows up in task show."""
    assert set(Approval.model_fields) <= {n.removeprefix("approval.") for n in page_fields(1)}
    waits = {n.removeprefix("pending_waits[].") for n in page_fields(1)}
    assert set(PendingWait.model_fields) - {"schema_version"} <= waits
    stamps = {n.removeprefix("versions.") for n in page_fields(1)}
    assert {f.alias or name for name, f in VersionStamps.model_fields.items()} - {"schema_version"} <= stamps


# ---- which proposals the executor takes --------------------------------------------------------


def envelope(cp: Checkpoint, *, decided_on: int | None = None, reply_to: str | None = None) -> Envelope:
    version = cp.state_version if decided_on is None else decided_on
    return Envelope(
        message_id="m-1",
        task_id=cp.task_id,
        task_version=version,
        kind="proposal",
        created_at=NOW,
        trace_id="m-1",
        in_reply_to=reply_to or events.request_id(cp.task_id, version),
    )


def test_the_page_no_longer_says_the_executor_needs_stage_ready() -> None:
    assert "task is `ready` at the state_version" not in PAGE
    assert "any stage, not only\n  `ready`" in PAGE


def test_a_proposal_at_a_stage_other_than_ready_that_offers_a_tool_is_taken() -> None:
    cp = created(support.app, "support", {"order_id": "o-1", "amount": 20})
    assert cp.stage == "working" and support.app.tools_at(cp.stage)
    assert executor_steps.unanswered(support.app, cp, envelope(cp)) is None


def test_a_proposal_the_task_moved_on_from_is_dropped_not_dead_lettered() -> None:
    cp = created(support.app, "support", {"order_id": "o-1", "amount": 20})
    moved = cp.model_copy(update={"versions": cp.versions.model_copy(update={"state_version": 3})})
    old = envelope(moved, decided_on=2)
    assert executor_steps.unanswered(support.app, moved, old) is not None
    assert executor_steps.superseded(moved, old)


@pytest.mark.parametrize("case", ["newer version", "no tool at the stage", "waits", "another request"])
def test_any_other_proposal_that_answers_no_outstanding_request_is_dead_lettered(case: str) -> None:
    cp = created(support.app, "support", {"order_id": "o-1", "amount": 20})
    env = envelope(cp)
    if case == "newer version":
        env = envelope(cp, decided_on=cp.state_version + 1)
    elif case == "no tool at the stage":
        cp = cp.model_copy(update={"business": cp.business.model_copy(update={"stage": "awaiting_approval"})})
    elif case == "waits":
        waiting = created(support.app, "support", {"order_id": "o-1", "amount": 5000})
        cp = waiting.model_copy(update={"business": waiting.business.model_copy(update={"stage": "working"})})
        env = envelope(cp)
    else:
        env = envelope(cp, reply_to=events.request_id(cp.task_id, cp.state_version + 7))
    assert executor_steps.unanswered(support.app, cp, env) is not None
    assert not executor_steps.superseded(cp, env)
