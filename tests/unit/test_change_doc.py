"""docs/change.md's kill path, held to the CLI: every command the section shows is one the CLI
parses, with every option it needs, and the commands that tests/test_tool_switches.py runs on the
real stack are taken from the page as written (tests/change_doc.py)."""

from __future__ import annotations

import click
import pytest
from change_doc import FREEZE, REVOKE, TASK, kill_path_commands

from wakeful.cli.main import cli
from wakeful.core.settings import Settings


def parsed(argv: list[str]) -> click.Command:
    """The command argv names, parsed as the CLI would (usage errors raised), run by nobody."""
    command: click.Command = cli
    ctx, rest = click.Context(cli, info_name="wakeful", obj=Settings.from_env()), list(argv)
    while isinstance(command, click.Group):  # the groups on the page take no options of their own
        sub = command.get_command(ctx, rest[0])
        if sub is None:
            raise click.UsageError(f"no command {rest[0]!r} under {ctx.command_path!r}")
        command, ctx, rest = sub, click.Context(sub, info_name=rest[0], parent=ctx), rest[1:]
    assert ctx.parent is not None
    command.make_context(str(ctx.info_name), rest, parent=ctx.parent)
    return command


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
