"""docs/limits.md held to the code: every command its bash blocks show is one the CLI parses, it
shows every `wakeful authority limits` command, and the operator it names may change a limit on the
local stack (tests/test_fair_stack.py runs the commands on worker processes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import page_commands, parsed

from wakeful.authority.limit_store import MAX_IN_FLIGHT
from wakeful.cli.limit_cmds import limits
from wakeful.operate.dev_signers import DEV_SIGNERS
from wakeful.schemas import events
from wakeful.workflow.limits import DAMAGED

pytestmark = pytest.mark.timeout(30)

PAGE = (Path(__file__).resolve().parents[2] / "docs/limits.md").read_text()


def commands() -> list[list[str]]:
    return page_commands(PAGE)


@pytest.mark.parametrize("argv", commands(), ids=" ".join)
def test_every_command_on_the_page_parses(argv: list[str]) -> None:
    assert parsed(argv).callback is not None


def test_the_page_shows_every_limits_command() -> None:
    shown = {argv[2] for argv in commands() if argv[:2] == ["authority", "limits"]}
    assert shown == set(limits.commands)


def test_the_operator_the_page_names_may_change_a_limit_on_the_local_stack() -> None:
    assert events.REOPEN in DEV_SIGNERS["ops-lead"] and "--by ops-lead" in PAGE


def test_what_the_page_says_a_damaged_record_holds_to_is_what_the_code_holds_to() -> None:
    assert DAMAGED == 1 and "holds its tenant\nto 1" in PAGE
    assert MAX_IN_FLIGHT >= 1 and "a whole number from 1" in PAGE
