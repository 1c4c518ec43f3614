"""A role that stops leaves a clean process: librdkafka's threads end before the interpreter tears
down what their SASL connections use (a stopped role used to segfault or abort at exit, now and then)."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from wakeful.core.settings import Settings

# Builds every client of the role with stop already set, so main() returns at once.
_RUN = """
import importlib, sys, threading
from wakeful.core.settings import Settings
stop = threading.Event()
stop.set()
importlib.import_module(f"wakeful.consumers.{sys.argv[1]}.main").main(Settings.from_env(), stop)
"""
RUNS = 10  # the crash came in about one stop in ten
AT_ONCE = 5  # runs side by side: each spends most of its time waiting on its logins and its minter


def exit_code(role: str) -> int:
    return subprocess.run(
        [sys.executable, "-c", _RUN, role], capture_output=True, timeout=120, check=False
    ).returncode


@pytest.mark.parametrize("role", ["inbound", "gate", "proposer", "executor"])
def test_a_stopped_role_exits_cleanly_every_time(role: str, settings: Settings, kafka_bootstrap: str) -> None:
    with ThreadPoolExecutor(AT_ONCE) as runs:
        codes = list(runs.map(exit_code, [role] * RUNS))
    assert codes == [0] * RUNS, f"{role} exited with {codes} (negative: killed by that signal)"
