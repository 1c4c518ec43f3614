"""Read-only calls that share a turn (workflow/batch.py, D68): a proposal may carry several calls
when every one is read-only; each is judged at the step it takes, on the op key it would have had
alone, and applied in order while the task stays in its loop. An effect never shares a turn."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from wakeful.authority.snapshot import Snapshot
from wakeful.bench import steps as bench_steps
from wakeful.consumers.proposer import messages as model_messages
from wakeful.consumers.proposer.models import RulesModel
from wakeful.consumers.proposer.openai_model import read_reply
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.memory import Status
from wakeful.schemas.proposals import MAX_CALLS, Call, Proposal
from wakeful.sdk import CLOSED, App, Effect, Fact, Next, Refuse, Remember, Start
from wakeful.workflow import batch, effects, engine, memory, window

NOW = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)
AUTH = Snapshot(approvers=frozenset({"alice"}), limit=0)
REF = {"ref": "t-1"}


def created(app: App) -> Checkpoint:
    moved = engine.create(app, "steps", Start("t-1", "desk", "default", {}, AUTH, NOW))
    assert isinstance(moved, engine.Moved)
    return moved.checkpoint


def first(app: App, cp: Checkpoint, tool: str) -> Effect:
    decided = effects.check_proposal(app, cp, tool, REF, auth=AUTH, now=NOW)
    assert isinstance(decided, Effect), decided
    return decided


def shown(app: App, cp: Checkpoint) -> dict[str, Any]:
    return window.build(app, cp, AUTH, [], {}, memory=[])


def test_the_rules_model_calls_the_read_only_tools_whose_arguments_it_knows_in_one_turn() -> None:
    app = bench_steps.reads
    proposal = RulesModel().propose(shown(app, created(app)))
    assert (proposal.tool, proposal.args) == ("read_1", REF)
    assert [(c.tool, c.args) for c in proposal.more] == [("read_2", REF), ("read_3", REF)]


def test_the_rules_model_never_puts_an_effect_beside_another_call() -> None:
    app = bench_steps.writes
    proposal = RulesModel().propose(shown(app, created(app)))
    assert proposal.tool == "write_1" and proposal.more == ()


def test_a_read_only_call_that_needs_what_another_returns_waits_for_its_own_turn() -> None:
    view = shown(bench_steps.reads, created(bench_steps.reads))
    view["task_card"] = {**view["task_card"], "ref": None}  # nothing known to call read_2 with
    proposal = RulesModel().propose(view)
    assert proposal.tool == "read_1" and proposal.more == ()


def test_the_model_is_offered_parallel_calls_only_where_more_than_one_tool_is_read_only() -> None:
    for app, parallel in ((bench_steps.reads, True), (bench_steps.writes, False), (bench_steps.one, False)):
        body = model_messages.request(shown(app, created(app)), "m", "tag")
        assert body["parallel_tool_calls"] is parallel, app.name
    described = [
        t["function"]["description"]
        for t in model_messages.tools(shown(bench_steps.reads, created(bench_steps.reads)))
    ]
    assert all("Read-only" in d for d in described[:3]) and "Read-only" not in described[3]


def reply(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    made = [
        {"id": f"c{n}", "type": "function", "function": {"name": t, "arguments": orjson.dumps(a).decode()}}
        for n, (t, a) in enumerate(calls)
    ]
    return {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": made}}]}


def test_a_reply_of_several_read_only_calls_is_one_proposal_and_any_other_mix_is_unusable() -> None:
    view = shown(bench_steps.reads, created(bench_steps.reads))
    good = read_reply(reply(("read_1", REF), ("read_3", REF)), view, "m")
    assert good.tool == "read_1" and good.more == (Call(tool="read_3", args=REF),) and good.unusable is None
    mixed = read_reply(reply(("read_1", REF), ("finish", REF)), view, "m")
    assert mixed.tool == "none" and "not finish" in (mixed.unusable or "")
    misfit = read_reply(reply(("read_1", REF), ("read_2", {"ref": 7})), view, "m")
    assert misfit.tool == "none" and "do not fit its schema" in (misfit.unusable or "")
    many = read_reply(reply(*[("read_1", REF)] * (MAX_CALLS + 1)), view, "m")
    assert many.tool == "none" and f"at most {MAX_CALLS}" in (many.unusable or "")


def test_each_call_of_a_turn_is_judged_at_its_own_step_on_the_key_it_would_have_alone() -> None:
    app = bench_steps.reads
    cp = created(app)
    judged = batch.check(
        app, cp, first(app, cp, "read_1"), [("read_2", REF), ("read_3", REF)], auth=AUTH, now=NOW
    )
    assert isinstance(judged, list)
    assert [e.op_key for e in judged] == ["read_2:t-1:v1:s1", "read_3:t-1:v1:s2"]


@pytest.mark.parametrize(
    ("app", "head", "more", "why"),
    [
        (bench_steps.writes, "write_1", [("write_2", REF)], "runs alone"),
        (bench_steps.reads, "read_1", [("finish", REF)], "finish is not a read-only tool"),
        (bench_steps.reads, "read_1", [("nothing", REF)], "nothing is not a read-only tool"),
        (
            bench_steps.reads,
            "read_1",
            [("read_2", {"ref": 7})],
            "call 2 of the proposal: arguments for read_2",
        ),
        (bench_steps.reads, "read_1", [("read_2", REF)] * 4, "step budget leaves 4"),
    ],
)
def test_a_turn_that_may_not_be_shared_is_refused_so_the_model_is_asked_again(
    app: App, head: str, more: list[tuple[str, dict[str, Any]]], why: str
) -> None:
    cp = created(app)
    refused = batch.check(app, cp, first(app, cp, head), more, auth=AUTH, now=NOW)
    assert isinstance(refused, Refuse) and why in refused.reason, refused


def test_the_calls_of_a_turn_are_applied_in_order_each_counted_and_kept() -> None:
    app = bench_steps.reads
    cp = created(app)
    calls = [(f"read_{n}", {"seen": "t-1"}, REF) for n in (1, 2, 3)]
    after, count = batch.done(app, cp, calls, auth=AUTH, now=NOW)
    assert count == 3 and after.execution.step == 3
    assert [r.op_key for r in after.execution.results] == [
        "read_1:t-1:v1",
        "read_2:t-1:v1:s1",
        "read_3:t-1:v1:s2",
    ]


def test_a_call_whose_done_moves_the_task_on_ends_the_turn() -> None:
    app = bench_steps.reads
    wf = dataclasses.replace(app.workflows[0], done=lambda ctx, tool, result: Next(CLOSED))
    moving = App(name="steps-moving", workflows=[wf], tools=app.tools)
    calls = [(f"read_{n}", {"seen": "t-1"}, REF) for n in (1, 2, 3)]
    after, count = batch.done(moving, created(moving), calls, auth=AUTH, now=NOW)
    assert (after.stage, count) == (CLOSED, 1)


def test_a_proposal_from_before_it_could_carry_more_calls_reads_as_one_call() -> None:
    old = {
        "schema_version": 1,
        "tool": "read_1",
        "args": REF,
        "rationale": "",
        "model": "m",
        "unusable": None,
        "failed": None,
        "tokens": 0,
    }
    assert Proposal.decode(orjson.dumps(old)).more == ()


def test_what_each_call_of_a_turn_remembers_is_kept_per_call_with_that_calls_op_key_as_source() -> None:
    app = bench_steps.reads
    base = app.workflows[0]

    def done(ctx: Any, tool: str, result: Any) -> Any:
        said = base.done(ctx, tool, result)
        assert isinstance(said, Next)
        return dataclasses.replace(said, remember=(Remember("vendor:v-1", "seen", f"by {tool}"),))

    wf = dataclasses.replace(base, done=done)
    learning = App(name="steps-learning", workflows=[wf], tools=app.tools, facts=[Fact("seen")])
    calls = [(f"read_{n}", {"seen": "t-1"}, REF) for n in (1, 2)]
    learned: list[list[Remember]] = []
    after, count = batch.done(learning, created(learning), calls, auth=AUTH, now=NOW, learned=learned)
    assert count == 2 and [[w.value for w in got] for got in learned] == [["by read_1"], ["by read_2"]]
    ops = [r.op_key for r in after.execution.results]
    groups: list[memory.Group] = [
        (memory.Writer("role:executor", f"op:{o}"), got, {}) for o, got in zip(ops, learned, strict=True)
    ]
    records, refused = memory.all_admitted(
        learning.fact_table, groups, tenant="default", task_id="t-1", state_version=4, now=NOW
    )
    assert refused == []
    assert [(r.provenance, r.writer, r.status) for r in records] == [
        ("op:read_1:t-1:v1", "role:executor", Status.QUARANTINED),
        ("op:read_2:t-1:v1:s1", "role:executor", Status.QUARANTINED),
    ]
    assert len({r.id for r in records}) == 2  # each its own id in the one change
