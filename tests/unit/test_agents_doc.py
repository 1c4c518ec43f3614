"""docs/agents.md held to the code beyond its tutorial module (tests/unit/test_tutorial.py): the
offline test it shows runs as the page says, the scaffold's own tests run as the page says, every
tool needs a permit in an app's policy (the page's lines give one, and a tool without one parks its
task as an unknown action), and the page no longer denies what it documents."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from wakeful.authority import documents
from wakeful.authority.snapshot import Snapshot
from wakeful.cli.main import cli
from wakeful.cli.scaffold import render
from wakeful.examples import support, tutorial
from wakeful.schemas import events
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk import Effect, Review, Start
from wakeful.workflow import effects, engine, wakes

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs/agents.md").read_text()
TESTING = PAGE.split("## Testing the decisions", 1)[1].split("\n## ", 1)[0]
NOW = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, flags=re.DOTALL | re.MULTILINE)


# ---- the offline harness, as the page runs it ---------------------------------------------------


def test_the_offline_test_on_the_page_runs_as_the_page_says(tmp_path: Path) -> None:
    [snippet] = blocks(TESTING, "py")
    assert "python test_offline.py" in TESTING
    (tmp_path / "test_offline.py").write_text(snippet)
    ran = subprocess.run(
        [sys.executable, "test_offline.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (ran.returncode, ran.stdout.strip()) == (0, "ok"), ran.stderr[-3000:]


def test_the_scaffold_commands_on_the_page_run_and_print_what_it_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    [console] = blocks(TESTING, "console")
    lines = [line.removeprefix("$ ").split("  #")[0].strip() for line in console.splitlines()]
    said = re.search(r'then "(\d+ passed, 0 failed)"', console)
    assert said is not None and len(lines) == 3
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WAKEFUL_HOME", str(tmp_path / "home"))
    for line in lines:
        argv = shlex.split(line)
        if argv[0] == "wakeful":
            result = CliRunner().invoke(cli, argv[1:])
            assert result.exit_code == 0, result.output
            continue
        assert argv[0] == "python"
        if "pytest" in argv:  # tests/unit/test_scaffold.py runs the generated tests under pytest
            assert argv[1:] == ["-m", "pytest", "test_rooms.py", "-q"]
            continue
        ran = subprocess.run(
            [sys.executable, *argv[1:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
        assert ran.stdout.splitlines()[-1] == said.group(1)


# ---- every tool needs a permit ------------------------------------------------------------------


def approved_booking(auth: Snapshot) -> Checkpoint:
    asked = {"room": "boardroom", "day": "2030-06-03", "people": 12}
    start = Start("t-1", "rooms-desk", "default", asked, auth, NOW)
    made = engine.create(tutorial.app, "room_booking", start)
    assert isinstance(made, engine.Moved)
    wait = made.checkpoint.execution.pending_waits[0]
    heard = wakes.Heard(events.APPROVE, {"version": 1}, "alice", wait.correlation_id)
    moved = wakes.on_event(tutorial.app, made.checkpoint, heard, auth=auth, now=NOW)
    assert isinstance(moved, engine.Moved)
    return moved.checkpoint


def booked_under(text: str | None) -> Effect | object:
    """The executor's ruling on booking the boardroom, approved by alice, under policy `text`
    (None: the app ships none, and the default policy rules)."""
    auth = Snapshot(
        approvers=frozenset({"alice"}),
        limit=1000,
        app="rooms",
        shipped=documents.parse(text) if text is not None else None,
    )
    args = {"task_id": "t-1", "room": "boardroom", "day": "2030-06-03"}
    return effects.check_proposal(tutorial.app, approved_booking(auth), "book_room", args, auth=auth, now=NOW)


def without_the_tool(text: str, tool: str) -> str:
    """The policy text with every paragraph that names `tool` left out."""
    return "\n\n".join(part for part in text.split("\n\n") if tool not in part) + "\n"


def permit_lines() -> list[str]:
    """The lines of the first text block after the page says every tool needs a permit."""
    shown = PAGE.split("**Every tool needs a permit, lookups included.**", 1)[1]
    return [line for line in blocks(shown, "text")[0].splitlines() if line]


def test_a_tool_the_apps_policy_never_names_parks_its_task_as_an_unknown_action() -> None:
    text = without_the_tool(tutorial.app.policy or "", "book_room")
    assert booked_under(text) == Review("unknown action 'book_room'")
    assert "`unknown action 'find_order'`" in PAGE and "needs_review" in PAGE


def test_an_app_without_a_policy_runs_its_tools_under_the_default() -> None:
    assert isinstance(booked_under(None), Effect)
    assert "permit (principal, action, resource);" in documents.DEFAULT_TEXT
    assert "`permit (principal, action, resource);`" in PAGE


def test_the_pages_permit_line_lets_the_tool_run_again() -> None:
    first, second = permit_lines()
    assert first == 'permit (principal, action == Action::"book_room", resource);'
    text = without_the_tool(tutorial.app.policy or "", "book_room") + first + "\n"
    assert isinstance(booked_under(text), Effect)
    assert second in (support.app.policy or "")  # the support app's lookups, permitted as shown


def test_the_scaffold_writes_an_app_without_a_policy_whose_tool_is_the_one_the_page_names() -> None:
    app_text = render("rooms")["rooms.py"]
    assert 'name = "record"' in app_text and "policy=" not in app_text
    assert '`permit (principal, action == Action::"record", resource);`' in PAGE


# ---- the page does not deny what it documents ----------------------------------------------------


def test_the_page_says_egress_is_enforced_and_how_a_process_a_tool_starts_goes_out() -> None:
    # Egress was a declaration until D116; the page must not say otherwise now, nor leave out the
    # one thing a tool that starts a process must do.
    assert "wakeful does not enforce it" not in PAGE and "declared for review,\nnot enforced" not in PAGE
    assert "is refused before it happens" in PAGE and "env=outbound_env()" in PAGE


def test_the_tool_reference_no_longer_denies_async_tools_read_only_tools_or_step_budgets() -> None:
    assert "wakeful does not have" not in PAGE
    for documented in ("Pending(handle, deadline)", "effect = False", "max_steps=6"):
        assert documented in PAGE
