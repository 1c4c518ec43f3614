"""docs/dlq.md held to the code: every command its bash blocks show is one the CLI parses, it shows
every `wakeful dlq` command, and the operator and the kind it names are the ones the code registers
(tests/test_dlq_cli.py runs the commands on the real stack)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import page_commands, parsed

from wakeful.cli.dlq_cmds import dlq
from wakeful.operate.dev_signers import DEV_SIGNERS
from wakeful.schemas import events

pytestmark = pytest.mark.timeout(30)

PAGE = (Path(__file__).resolve().parents[2] / "docs/dlq.md").read_text()


def commands() -> list[list[str]]:
    return page_commands(PAGE)


@pytest.mark.parametrize("argv", commands(), ids=" ".join)
def test_every_command_on_the_page_parses(argv: list[str]) -> None:
    assert parsed(argv).callback is not None


def test_the_page_shows_every_dlq_command() -> None:
    assert {argv[1] for argv in commands() if argv[0] == "dlq"} == set(dlq.commands)


def test_the_operator_the_page_names_may_replay_on_the_local_stack() -> None:
    assert events.REPLAY in DEV_SIGNERS["ops-oncall"]
    assert f"--kinds {events.REPLAY}" in PAGE
