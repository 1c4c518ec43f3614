"""Start-up checks of the servers wakeful spawns: liveness is the child's, not its command line's."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from wakeful.core import process
from wakeful.core.settings import Settings
from wakeful.devstack import stack

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


def test_private_tree_closes_a_tree_to_other_users_and_follows_no_link(tmp_path: Path) -> None:
    root, outside = tmp_path / "state", tmp_path / "outside.txt"
    (root / "kafka" / "data").mkdir(parents=True)
    (root / "kafka" / "data" / "00.log").write_text("signed")
    outside.write_text("not ours")
    outside.chmod(0o644)
    (root / "kafka" / "link").symlink_to(outside)
    (root / "kafka").chmod(0o755)
    (root / "kafka" / "data" / "00.log").chmod(0o664)
    assert process.private_tree(root) == []
    modes = {oct(p.lstat().st_mode & 0o777) for p in root.rglob("*") if not p.is_symlink()}
    assert modes <= {"0o700", "0o600"}
    assert outside.stat().st_mode & 0o777 == 0o644  # the link's target is not the tree's


def test_dev_up_leaves_a_state_dir_that_is_also_a_users_folder_as_it_is(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "redis").mkdir(parents=True)
    (home / "redis" / "appendonly.aof").write_text("ledger keys")
    (home / "notes.txt").write_text("the user's")
    for path in (home, home / "redis", home / "notes.txt", home / "redis" / "appendonly.aof"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    settings = Settings.from_env({"WAKEFUL_HOME": str(home)})
    stack.private(settings, lambda line: None)
    assert home.stat().st_mode & 0o777 == 0o755 and (home / "notes.txt").stat().st_mode & 0o777 == 0o644
    assert (home / "redis").stat().st_mode & 0o777 == 0o700
    assert (home / "redis" / "appendonly.aof").stat().st_mode & 0o777 == 0o600


def test_a_server_that_ended_but_waits_for_its_parent_to_reap_it_counts_as_stopped(tmp_path: Path) -> None:
    """A server a test worker started itself (test_resume restarts Redis and Kafka so) stays a
    zombie until that worker reaps it; `dev down` in another process waited out its grace for it,
    then failed before it stopped Redis, which was left running."""
    starts_and_never_reaps = (
        "import subprocess, time; print(subprocess.Popen(['sleep', '60']).pid, flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", starts_and_never_reaps], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        (tmp_path / "pid").write_text(f"{pid}\n")
        started = time.monotonic()
        assert process.stop(tmp_path / "pid", lambda _p: True, grace=DEADLINE_S) == pid
        assert time.monotonic() - started < DEADLINE_S  # ended at SIGTERM, not killed after the grace
        assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE and not (tmp_path / "pid").exists()
    finally:
        parent.kill()
        parent.wait(10)
