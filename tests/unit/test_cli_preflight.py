"""On a machine where the stack is not running (a fresh state dir, nothing listening), every command
that needs it says in one line how to start it: never a credentials error, a traceback or a hang."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import free_ports

from wakeful.cli.demo import Demo
from wakeful.core.settings import Settings

NEEDS_THE_STACK = [
    ["task", "new", "--amount", "5"],
    ["task", "approve", "t-1", "--by", "alice", "--version", "1"],
    ["task", "run", "t-1"],
    ["task", "show", "t-1"],
    ["task", "list"],
    ["ledger"],
    ["authority", "show"],
    ["authority", "init"],
    ["authority", "limit", "set", "10"],
    ["worker", "all"],
    ["worker", "gate"],
    ["dev", "smoke"],
    ["admin", "topics"],
    ["admin", "acl", "--apply"],
    ["bench-state"],
]


@pytest.fixture(scope="module")
def nowhere(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment naming an empty state dir and ports where nothing listens."""
    kafka, controller, redis_port = free_ports(3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAKEFUL_")}
    home = tmp_path_factory.mktemp("fresh-home")
    return env | {
        "WAKEFUL_HOME": str(home),
        "WAKEFUL_KAFKA_PORT": str(kafka),
        "WAKEFUL_KAFKA_CONTROLLER_PORT": str(controller),
        "WAKEFUL_REDIS_PORT": str(redis_port),
    }


@pytest.mark.parametrize("argv", NEEDS_THE_STACK, ids=" ".join)
def test_command_without_a_running_stack_says_in_one_line_how_to_start_it(
    argv: list[str], nowhere: dict[str, str]
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "wakeful.cli.main", *argv],
        env=nowhere,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and "`wakeful dev up`" in lines[0], lines[0]
    assert "credentials" not in lines[0]
    assert not any(Path(nowhere["WAKEFUL_HOME"]).iterdir()), "a failed preflight must leave no state behind"


def test_demo_builds_no_client_before_it_has_started_the_stack(nowhere: dict[str, str]) -> None:
    # On a fresh machine the Redis credentials only exist once the demo's own `stack.up()` ran.
    demo = Demo(Settings.from_env(nowhere), lambda _line: None)
    assert demo.failures == [] and demo._client is None


@pytest.mark.parametrize("bad", ["x}:lease", "t 1", "a" * 65])
def test_a_malformed_task_id_is_refused_in_one_line_before_anything_is_read(
    bad: str, nowhere: dict[str, str]
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "wakeful.cli.main", "task", "show", bad],
        env=nowhere,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2 and "is not a task id" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
