"""The ops page's pure parts (D76): the session cookie is refused when forged, tampered with, signed
by another key or expired; a CSRF token belongs to one session; a failed login waits longer each
time; every value shown is escaped; a chart draws what it is given; the confirmation says exactly
what a switch will do; and the stuck rule, the throughput and the latencies read from the index
and the log's tail are what workflow/stuck.py and the log say."""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime, timedelta

import pytest
from refund_rules import APP

from wakeful.operate.ops import auth as ops_auth
from wakeful.operate.ops.data import finished_stages, per_minute, runtime_id, tenant_of_task
from wakeful.operate.ops.log import activity, per_minute_median, percentile
from wakeful.operate.ops.render import Switch, confirm_text, esc, svg_chart, table
from wakeful.operate.ops.sweep import parse_index_key
from wakeful.schemas.changelog import action_record
from wakeful.schemas.custody import ApprovalBound
from wakeful.schemas.logs import ActionLogEntry, ActionStatus, OutboxRecord, WaitSummary
from wakeful.workflow.stuck import stuck_summary

KEY = bytes(range(32))
NOW = 1_800_000_000
AT = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


# ---- the session cookie and CSRF ------------------------------------------------------------------


def test_a_signed_session_names_its_operator_until_it_expires() -> None:
    cookie = ops_auth.sign(KEY, "ops-lead", NOW, lasts=60)
    session = ops_auth.verify(KEY, cookie, NOW + 59)
    assert session is not None and session.operator == "ops-lead" and session.expires == NOW + 60
    assert ops_auth.verify(KEY, cookie, NOW + 60) is None


def _tampered(cookie: str) -> str:
    encoded, mac = cookie.split(".")
    payload = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    forged = payload.replace("ops-lead", "ops-boss")
    return base64.urlsafe_b64encode(forged.encode()).decode().rstrip("=") + "." + mac


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "no-dot",
        "a.b.c",
        "x" * 600,
        "bm90IGEgcGF5bG9hZA.bm90IGEgbWFj",
        "\u00e9\u00e9.\u00e9",
    ],
)
def test_a_malformed_cookie_is_no_session(value: str | None) -> None:
    assert ops_auth.verify(KEY, value, NOW) is None


def test_a_cookie_tampered_with_or_signed_by_another_key_is_no_session() -> None:
    cookie = ops_auth.sign(KEY, "ops-lead", NOW)
    assert ops_auth.verify(KEY, _tampered(cookie), NOW) is None
    assert ops_auth.verify(b"another key" * 3, cookie, NOW) is None
    assert ops_auth.verify(KEY, cookie[:-2] + ("AA" if not cookie.endswith("AA") else "BB"), NOW) is None


@pytest.mark.parametrize("name", ["", "a b", "a|b", "<script>", "x" * 65, "ops\nlead"])
def test_no_session_is_signed_for_a_name_no_signer_can_have(name: str) -> None:
    with pytest.raises(ValueError, match="not an operator name"):
        ops_auth.sign(KEY, name, NOW)


def test_a_csrf_token_belongs_to_its_session_only() -> None:
    mine = ops_auth.verify(KEY, ops_auth.sign(KEY, "ops-lead", NOW), NOW)
    theirs = ops_auth.verify(KEY, ops_auth.sign(KEY, "ops-lead", NOW), NOW)
    assert mine is not None and theirs is not None
    token = ops_auth.csrf_token(KEY, mine)
    assert ops_auth.csrf_ok(KEY, mine, token)
    for wrong in (None, "", ops_auth.csrf_token(KEY, theirs), token[:-1], token + "x"):
        assert not ops_auth.csrf_ok(KEY, mine, wrong), wrong


@pytest.mark.parametrize(
    ("given", "ok"),
    [("right-password", True), ("right-passwor", False), ("", False), ("Right-password", False)],
)
def test_the_password_is_compared_whole(given: str, ok: bool) -> None:
    assert ops_auth.password_ok(given, "right-password") is ok


@pytest.mark.parametrize(("before", "wait"), [(0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (50, 8.0)])
def test_each_failed_login_waits_longer_up_to_a_cap(before: int, wait: float) -> None:
    assert ops_auth.delay_after(before) == wait


def test_failed_logins_are_counted_per_address_within_the_window() -> None:
    failures = ops_auth.Failures()
    assert [failures.add("10.0.0.1", t) for t in (0.0, 1.0, 2.0)] == [0, 1, 2]
    assert failures.add("10.0.0.2", 3.0) == 0
    assert failures.count("10.0.0.1", ops_auth.FAILURE_WINDOW_S + 1.5) == 1


# ---- rendering ------------------------------------------------------------------------------------


def test_every_value_shown_is_escaped() -> None:
    shown = table(["task"], [["<script>alert(1)</script>"], ['"><img src=x>']])
    assert "<script>" not in shown and "<img" not in shown
    assert "&lt;script&gt;" in shown and "&quot;&gt;&lt;img" in shown
    assert esc(esc("<b>")) == "&lt;b&gt;"  # markup made here is not escaped twice


def test_a_bar_chart_draws_one_bar_per_nonzero_minute_under_a_round_top() -> None:
    svg = svg_chart([0, 3, 0, 7, 12], title="finished <per> minute", unit="tasks")
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert len(re.findall(r"<rect ", svg)) == 3
    assert ">20 tasks<" in svg  # 12 rounds up to 20
    assert "finished &lt;per&gt; minute" in svg and "<per>" not in svg
    heights = [float(h) for h in re.findall(r'<rect [^>]*height="([0-9.]+)"', svg)]
    assert heights == sorted(heights) and heights[-1] / heights[0] == pytest.approx(4.0, rel=0.01)


def test_a_line_chart_skips_minutes_without_a_value() -> None:
    svg = svg_chart([None, 100.0, None, 250.0], title="latency", unit="ms", bars=False)
    assert len(re.findall(r"<circle ", svg)) == 2 and "<polyline" in svg
    empty = svg_chart([None, None], title="latency", unit="ms", bars=False)
    assert "<circle" not in empty and "<polyline" not in empty and ">1 ms<" in empty


@pytest.mark.parametrize(
    ("switch", "said"),
    [
        (
            Switch("freeze", "task:t-1", "dispute", "ops-lead"),
            "Freeze task t-1. From the next wake, no new step runs for this task",
        ),
        (Switch("freeze", "tenant:acme", "audit", "ops-lead"), "Freeze every task of tenant acme."),
        (Switch("freeze", "app:refund", "bug", "ops-lead"), "Freeze every task of app refund."),
        (
            Switch("freeze", "all", "incident", "ops-lead"),
            "Freeze the whole fleet (every task of every tenant and app).",
        ),
        (
            Switch("thaw", "task:t-1", "settled", "ops-lead"),
            "Thaw task t-1. The freeze is lifted and every task with held work is woken",
        ),
        (
            Switch("disable", "refund", "bank down", "ops-lead", "refund"),
            "Disable tool refund of app refund.",
        ),
        (
            Switch("enable", "refund", "bank up", "ops-lead", "refund"),
            "Enable tool refund of app refund again.",
        ),
    ],
)
def test_the_confirmation_says_exactly_what_the_switch_does_who_and_why(switch: Switch, said: str) -> None:
    text = confirm_text(switch)
    assert text.startswith(said), text
    assert f"Recorded as done by ops-lead, because: {switch.reason}." in text


def test_an_unknown_switch_has_no_confirmation() -> None:
    with pytest.raises(ValueError, match="unknown switch"):
        confirm_text(Switch("delete", "all", "r", "ops-lead"))


# ---- what the index and the log say ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("wk:index:{acme}:stage:ready", ("acme", "stage", "ready")),
        ("wk:index:{default}:wait:approval", ("default", "wait", "approval")),
        ("wk:index:{a.b}:tasks", ("a.b", "tasks", "")),
        ("wk:index:{a b}:tasks", None),
        ("wk:index:acme:tasks", None),
        ("wk:index:{acme}:other:x", None),
        ("wk:{t-1}:state", None),
    ],
)
def test_the_sweep_reads_only_index_keys(name: str, parsed: tuple[str, str, str] | None) -> None:
    assert parse_index_key(name) == parsed


@pytest.mark.parametrize(
    ("task_id", "tenant", "named", "runtime"),
    [
        ("t-1", "default", "t-1", "t-1"),
        ("acme.t-1", "acme", "t-1", "acme.t-1"),
        ("a.b.t-1", "a.b", "t-1", "a.b.t-1"),
    ],
)
def test_a_tasks_tenant_and_runtime_id_follow_the_namespaces(
    task_id: str, tenant: str, named: str, runtime: str
) -> None:
    assert tenant_of_task(task_id) == tenant
    assert runtime_id(tenant, {"task_id": named}) == runtime


def _summary(stage: str, age_s: float, waits: bool = False, workflow: str = "refund") -> dict[str, object]:
    return {
        "task_id": "t-1",
        "workflow": workflow,
        "stage": stage,
        "updated_at": (AT - timedelta(seconds=age_s)).isoformat(),
        "waits": [{"wait_for": "approval"}] if waits else [],
    }


@pytest.mark.parametrize(
    ("doc", "held", "why"),
    [
        (_summary("received", 900), False, "stage received offers no tool and waits for nothing"),
        (_summary("ready", 900), False, "stage ready offers a tool, waits for nothing, and no proposal came"),
        (_summary("ready", 60), False, None),  # a proposal may be in flight
        (_summary("awaiting_approval", 900, waits=True), False, None),  # something will wake it
        (_summary("ready", 900), True, None),  # a freeze holds it: the thaw wakes it
        (_summary("closed", 900), False, None),
        (_summary("needs_review", 900), False, None),  # a person's
        (_summary("ready", 900, workflow="another"), False, None),  # not this app's to judge
    ],
)
def test_a_task_is_stuck_from_its_summary_as_from_its_checkpoint(
    doc: dict[str, object], held: bool, why: str | None
) -> None:
    found = stuck_summary(APP, doc, AT, 600, held=held)
    assert (found is None) if why is None else (found is not None and found.startswith(why)), found


def test_finished_stages_are_closed_and_each_workflows_ends() -> None:
    assert finished_stages(APP, {"received", "ready", "closed", "needs_review", "quarantined"}) == {"closed"}


def test_throughput_counts_each_finish_in_its_minute() -> None:
    now = 10 * 60_000.0
    assert per_minute(
        [now - 1, now - 30_000, now - 60_001, now - 9 * 60_000 - 1, now + 5, now - 3_600_000], now, 10
    ) == [
        1,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        1,
        2,
    ]


def _change(
    task: str, version: int, at: datetime, *, waits: bool = False, approved: bool = False
) -> OutboxRecord:
    wait = WaitSummary(wait_for="approval", deadline=at + timedelta(days=1), correlation_id="c")
    return OutboxRecord(
        record_id=f"{task}:{version}",
        task_id=task,
        state_version=version,
        message_id="m",
        stage="x",
        task_version=1,
        at=at,
        waits=(wait,) if waits else (),
        approval=ApprovalBound(version=1, digest="d", approver="alice", scope="s") if approved else None,
    )


def _action(
    task: str, status: ActionStatus, started: datetime, finished: datetime | None, attempts: int = 0
) -> object:
    return action_record(
        ActionLogEntry(
            op_key=f"refund:{task}:v1",
            task_id=task,
            status=status,
            fence=1,
            started_at=started,
            finished_at=finished,
            attempts=attempts,
            reason="bank said no" if status == ActionStatus.FAILED else None,
        )
    )


def test_approval_latency_wake_to_effect_and_retries_are_read_from_the_logs_order() -> None:
    s = timedelta(seconds=1)
    items = [
        _change("t-1", 1, AT, waits=True),  # its approval wait begins
        _change("t-1", 2, AT + 30 * s, approved=True),  # approved 30 s later: the wake
        _action("t-1", ActionStatus.IN_FLIGHT, AT + 31 * s, None),
        _change("t-1", 3, AT + 32 * s),  # the close, logged before the action's outcome
        _action("t-1", ActionStatus.SUCCEEDED, AT + 31 * s, AT + 32 * s, attempts=2),
        _change("t-2", 2, AT + 40 * s, approved=True),  # its wait began before the tail: not counted
        _action("t-2", ActionStatus.FAILED, AT + 41 * s, AT + 42 * s),
    ]
    found = activity(items)  # type: ignore[arg-type]
    assert found.approvals == [(AT + 30 * s, 30_000.0)]
    assert found.effects == [(AT + 32 * s, 2_000.0)]
    assert found.retried == [("t-1", "refund:t-1:v1", 2)]
    assert found.failed == [("t-2", "refund:t-2:v1", "bank said no")]


def test_latency_per_minute_is_each_minutes_median() -> None:
    now = AT + timedelta(minutes=3)
    points = [
        (AT + timedelta(seconds=10), 100.0),
        (AT + timedelta(seconds=20), 300.0),
        (AT + timedelta(seconds=30), 200.0),
    ]
    assert per_minute_median(points, now, 4) == [None, 200.0, None, None]
    assert percentile([5.0, 1.0, 3.0], 50) == 3.0 and percentile([], 99) is None


def test_a_dead_letter_is_listed_with_who_refused_it_and_why_and_a_message_that_is_no_letter_too() -> None:
    from wakeful.operate.dlq.read import Letter
    from wakeful.operate.ops.panels import dlq
    from wakeful.schemas.logs import DeadLetter

    letter = DeadLetter(
        source="inbound", reason="bad <signature>", task_id="t-9", raw="{}", at=AT, topic="wakeful.events"
    )
    shown = dlq([Letter(0, 17, AT, letter), Letter(1, 3, None, None, "not a dead letter: not JSON")])
    assert "0:17" in shown and "inbound (wakeful.events)" in shown and "bad &lt;signature&gt;" in shown
    assert "1:3" in shown and "not a dead letter: not JSON" in shown
