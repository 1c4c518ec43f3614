"""The CLI run as an operator runs it, in its own process, able to import the tests' own apps; and
a command line parsed as the CLI would parse it, run by nobody (for the pages that show commands)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import orjson

from wakeful.cli.main import cli
from wakeful.core.settings import Settings

TESTS = Path(__file__).resolve().parent


def with_tests_on_path(env: dict[str, str]) -> dict[str, str]:
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(TESTS)) if p)}


def wakeful(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wakeful.cli.main", *argv],
        env=with_tests_on_path(dict(os.environ)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def doc(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """What a command printed with --json."""
    found: dict[str, Any] = orjson.loads(result.stdout)
    return found


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


def page_commands(page: str) -> list[list[str]]:
    """The `wakeful ...` command lines of a page's bash blocks, as argv after `wakeful` (a comment
    after two spaces and a `#` is not part of the command)."""
    blocks = re.findall(r"```bash\n(.*?)```", page, re.DOTALL)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return [shlex.split(line)[1:] for line in lines if line.startswith("wakeful ")]
