"""docs/change.md's kill path, held to the CLI: every command the section shows is one the CLI
parses, with every option it needs, and the commands that tests/test_tool_switches.py runs on the
real stack are taken from the page as written (tests/change_doc.py)."""

from __future__ import annotations

import click
import pytest
from change_doc import FREEZE, REVOKE, TASK, kill_path_commands
from cli_run import parsed


@pytest.mark.parametrize("argv", kill_path_commands(), ids=" ".join)
def test_every_kill_path_command_on_the_page_parses(argv: list[str]) -> None:
    assert parsed([TASK.replace("...", "1") if a == TASK else a for a in argv]).callback is not None


def test_the_page_shows_the_whole_kill_path() -> None:
    shown = {" ".join(argv[:2]) for argv in kill_path_commands()}
    assert {
        "tools publish",
        "tools list",
        "tools disable",
        "tools enable",
        "task reopen",
        "tools history",
    } <= shown


def test_a_command_the_cli_does_not_know_is_caught() -> None:
    with pytest.raises(click.UsageError):
        parsed(["tools", "disable", "refund", "--reasn", "typo", "--by", "ops-lead"])
    with pytest.raises(click.UsageError):
        parsed(["tools", "disable", "refund", "--by", "ops-lead"])  # no reason


@pytest.mark.parametrize("argv", kill_path_commands(FREEZE), ids=" ".join)
def test_every_freeze_command_on_the_page_parses(argv: list[str]) -> None:
    assert parsed([TASK.replace("...", "1") if a == TASK else a for a in argv]).callback is not None


def test_the_page_shows_freeze_frozen_and_thaw() -> None:
    assert {argv[0] for argv in kill_path_commands(FREEZE)} == {"freeze", "frozen", "thaw"}


@pytest.mark.parametrize("argv", kill_path_commands(REVOKE), ids=" ".join)
def test_every_revoke_command_on_the_page_parses(argv: list[str]) -> None:
    assert parsed(argv).callback is not None
