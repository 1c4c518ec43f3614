"""docs/schedules.md held to the code: every command its bash blocks show is one the CLI parses, and
the scheduler it names for another tenant is the one the timers sign that tenant's ticks with
(tests/test_schedules_stack.py runs the commands on worker processes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import page_commands, parsed

from wakeful.workflow import schedules

pytestmark = pytest.mark.timeout(30)

PAGE = (Path(__file__).resolve().parents[2] / "docs/schedules.md").read_text()


@pytest.mark.parametrize("argv", page_commands(PAGE), ids=" ".join)
def test_every_command_on_the_page_parses(argv: list[str]) -> None:
    assert parsed(argv).callback is not None


def test_the_signer_the_page_names_for_a_tenant_is_the_one_its_ticks_are_signed_with() -> None:
    assert f"signers add {schedules.signer_of('acme')} --kinds task.create --tenant acme" in PAGE
    assert "--tenant acme" in PAGE and f"`{schedules.signer_of('acme')}`" in PAGE
