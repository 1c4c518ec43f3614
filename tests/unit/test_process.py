"""Start-up checks of the servers wakeful spawns: liveness is the child's, not its command line's."""

from __future__ import annotations

import signal
from pathlib import Path

import psutil

from wakeful.devstack import process

DEADLINE_S = 10.0


def _never_ours(_proc: psutil.Process) -> bool:
    # What /proc/<pid>/cmdline gives while the kernel is still loading the new program: nothing.
    return False


def test_a_starting_server_is_alive_before_its_command_line_reads_as_ours(tmp_path: Path) -> None:
    pid = process.start_detached(["sleep", "30"], tmp_path / "out.log", tmp_path / "pid", tmp_path)
    try:
        assert process.running_pid(tmp_path / "pid", _never_ours) is None
        assert process.alive(pid)
    finally:
        psutil.Process(pid).send_signal(signal.SIGKILL)


def test_a_server_that_exited_during_start_up_is_not_alive(tmp_path: Path) -> None:
    pid = process.start_detached(["false"], tmp_path / "out.log", tmp_path / "pid", tmp_path)
    assert process.wait_until(lambda: not process.alive(pid), DEADLINE_S)
