"""Provisioning moved from `wakeful dev` to `wakeful admin` (D96): each old name runs the very same
command (function, options, stdout, exit code) and says on stderr, in one line, where it went."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from wakeful.cli.admin_cmds import admin
from wakeful.cli.dev_cmds import MOVED_TO_ADMIN, dev
from wakeful.cli.main import cli
from wakeful.cli.moved import MovedCommand

MOVED = ["acl", "kafka-acl", "topics", "functions"]  # the list, written out: not the code's


@pytest.mark.parametrize("name", MOVED)
def test_every_old_dev_name_runs_the_same_function_as_its_admin_command_and_names_it(name: str) -> None:
    old, new = dev.commands[name], admin.commands[name]
    assert isinstance(old, MovedCommand) and not isinstance(new, MovedCommand)
    assert old.callback is new.callback, "the alias must run the admin command's own function"
    assert [p.opts for p in old.params] == [p.opts for p in new.params]
    assert old.notice == f"`wakeful dev {name}` is deprecated: it is now `wakeful admin {name}`"
    assert f"`wakeful admin {name}`" in (old.short_help or "")


def test_admin_holds_the_provisioning_commands_and_dev_lists_each_old_name_as_moved() -> None:
    assert sorted(MOVED_TO_ADMIN) == sorted(MOVED) and set(MOVED) <= set(admin.commands)
    assert cli.commands["admin"] is admin
    listed = CliRunner().invoke(cli, ["dev", "--help"]).output
    for name in MOVED:
        assert f"Deprecated: it is now `wakeful admin {name}`." in listed, listed
    assert not [c for n, c in dev.commands.items() if n not in MOVED and isinstance(c, MovedCommand)]


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wakeful.cli.main", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# kafka-acl prints its plan with no server (exit 0); topics needs Kafka and stops in one line (exit 2).
@pytest.mark.parametrize("name", ["kafka-acl", "topics"])
def test_an_old_name_prints_what_the_new_one_prints_with_one_line_more_on_stderr(name: str) -> None:
    new = _run("admin", name)
    old = _run("dev", name)
    assert old.returncode == new.returncode, (old.stderr, new.stderr)
    assert old.stdout == new.stdout
    first, *rest = old.stderr.splitlines()
    assert first == f"`wakeful dev {name}` is deprecated: it is now `wakeful admin {name}`"
    assert rest == new.stderr.splitlines()
    assert "deprecated" not in new.stderr


def test_an_old_name_with_a_bad_option_fails_as_the_new_one_does() -> None:
    runner = CliRunner()
    old = runner.invoke(cli, ["dev", "acl", "--no-such-option"])
    new = runner.invoke(cli, ["admin", "acl", "--no-such-option"])
    assert old.exit_code == new.exit_code == click.UsageError.exit_code
