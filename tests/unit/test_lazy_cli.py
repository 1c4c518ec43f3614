"""`wakeful` imports a command's module when that command runs (cli/lazy.py): every role process
starts through the CLI, and importing every command up front cost each of them about 0.4 s."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from wakeful.cli.lazy import LazyGroup
from wakeful.cli.main import COMMANDS, cli

loaded: list[str] = []


def _made(name: str) -> click.Command:
    loaded.append(name)
    return click.Command(name)


@pytest.fixture()
def group() -> LazyGroup:
    loaded.clear()
    return LazyGroup("g", lazy={"a": lambda: _made("a"), "b": lambda: _made("b")})


def test_a_command_is_loaded_when_it_is_looked_up_and_not_before(group: LazyGroup) -> None:
    ctx = click.Context(group)
    assert group.list_commands(ctx) == ["a", "b"] and loaded == []
    assert (command := group.get_command(ctx, "a")) is not None and command.name == "a"
    assert group.get_command(ctx, "a") is command and loaded == ["a"]  # once
    assert group.get_command(ctx, "nope") is None


def test_walking_the_commands_loads_them_all(group: LazyGroup) -> None:
    assert sorted(group.commands) == ["a", "b"] and sorted(loaded) == ["a", "b"]


def test_a_command_listed_under_another_name_is_refused() -> None:
    wrong = LazyGroup("g", lazy={"a": lambda: click.Command("b")})
    with pytest.raises(TypeError, match="listed as 'a' is named 'b'"):
        wrong.get_command(click.Context(wrong), "a")


def test_every_listed_command_loads_under_its_name() -> None:
    ctx = click.Context(cli)
    assert [name for name in COMMANDS if (c := cli.get_command(ctx, name)) is None or c.name != name] == []


def test_a_role_process_loads_no_operator_bench_or_local_stack_module() -> None:
    code = (
        "import sys, click\n"
        "from wakeful.cli.main import cli\n"
        "cli.get_command(click.Context(cli), 'worker')\n"
        "print(sorted(m for m in sys.modules if m.startswith(('wakeful.operate', 'wakeful.bench', "
        "'wakeful.devstack', 'wakeful.cli.bench_cmds', 'wakeful.cli.ops_cmd', 'wakeful.cli.audit_cmds'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
