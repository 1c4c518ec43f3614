"""docs/retention.md held to the code: every command its bash blocks show is one the CLI parses,
and the defaults, floors and settings it states are the code's."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from cli_run import page_commands, parsed

from wakeful.core.settings import Settings
from wakeful.sdk import retention

pytestmark = pytest.mark.timeout(30)

PAGE = Path(__file__).resolve().parents[2] / "docs/retention.md"


def commands() -> list[list[str]]:
    return page_commands(PAGE.read_text())


@pytest.mark.parametrize("argv", commands(), ids=" ".join)
def test_every_command_on_the_page_parses(argv: list[str]) -> None:
    assert parsed(argv).callback is not None


def test_the_page_shows_purge_and_the_bench() -> None:
    shown = {tuple(argv[:2]) for argv in commands()}
    assert ("task", "purge") in shown and ("bench-retention", "--closed") in shown


def days(span: timedelta) -> str:
    return f"{span.days} day" + ("s" if span.days != 1 else "")


def test_the_page_states_the_codes_defaults_and_floors() -> None:
    text = " ".join(PAGE.read_text().split())
    assert f"| `closed_tasks` | {days(retention.CLOSED_TASKS)} |" in text
    assert f"| `receipts` | {days(retention.RECEIPTS)} |" in text
    assert f"| `evidence` | {days(retention.EVIDENCE)} |" in text
    assert f"at least {days(retention.CLOSED_TASKS_FLOOR)}" in text
    assert "WAKEFUL_LOG_RETENTION_DAYS=" in text
    assert Settings.from_env({}).log_retention_days == 0  # the page's "0 (the default): forever"
