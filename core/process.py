"""Start, find and stop the local servers by pid file; `down` only ever stops what `up` started."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil

# A server's data (Kafka's log segments, Redis's append-only file) holds signed events and ledger
# keys: readable by anyone on the machine, it is past every login and ACL. Whatever umask the user
# has, the servers and what wakeful writes beside them make files 0600 and folders 0700.
PRIVATE_UMASK = 0o077


def start_detached(argv: Sequence[str], log_path: Path, pid_path: Path, cwd: Path) -> int:
    """Run argv in its own session so it outlives the CLI, creating only private files; record its pid."""
    log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
            umask=PRIVATE_UMASK,
        )
    pid_path.write_text(f"{proc.pid}\n")
    os.chmod(pid_path, 0o600)
    return proc.pid


def private_tree(root: Path) -> list[str]:
    """Make root (and its parents, as needed) and take every group and other bit off it and all it
    holds: folders 0700, files keep only their owner's bits. Links are not followed, and a file
    that goes away meanwhile (a running broker renames its checkpoints) is no error. Returns what
    could not be changed (not this user's), for the caller to name."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    refused: list[str] = []
    for folder, dirs, files in os.walk(root):
        for path, wanted in ((folder, 0o700), *((os.path.join(folder, f), None) for f in files)):
            try:
                mode = os.lstat(path).st_mode
                if stat.S_ISLNK(mode) or not mode & 0o077:
                    continue
                os.chmod(path, wanted if wanted is not None else stat.S_IMODE(mode) & 0o700)
            except FileNotFoundError:
                continue
            except PermissionError:
                refused.append(path)
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
    return refused


def alive(pid: int) -> bool:
    """Whether a child we just spawned still runs. Not is_ours(): while the kernel is still
    loading the new program, /proc/<pid>/cmdline reads empty, and a live server looked dead."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def running_pid(pid_path: Path, is_ours: Callable[[psutil.Process], bool]) -> int | None:
    """The recorded pid if that process is alive and is_ours(process) holds.

    The is_ours check keeps a recycled pid from being mistaken for our server.
    """
    try:
        pid = int(pid_path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return pid if is_ours(proc) else None
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def stop(pid_path: Path, is_ours: Callable[[psutil.Process], bool], grace: float = 30.0) -> int | None:
    """SIGTERM our process, SIGKILL it after grace seconds; returns the pid stopped, if any."""
    pid = running_pid(pid_path, is_ours)
    if pid is None:
        pid_path.unlink(missing_ok=True)
        return None
    proc = psutil.Process(pid)
    proc.send_signal(signal.SIGTERM)
    if not _ended(proc, grace):
        proc.kill()
        if not _ended(proc, 10):
            raise TimeoutError(f"pid {pid} ({pid_path}) did not end 10 s after SIGKILL")
    pid_path.unlink(missing_ok=True)
    return pid


def _ended(proc: psutil.Process, timeout: float) -> bool:
    """Whether proc ended within timeout. One that ended and waits for its parent to reap it has
    ended too: a server that a long-lived process (a test worker) started itself stays a zombie
    until that process reaps it, and psutil's wait() would wait out the whole grace for it, and
    then fail a `dev down` before it stopped the next server."""

    def ended() -> bool:
        try:
            return proc.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    return wait_until(ended, timeout, interval=0.05)


def hold_lock(path: Path) -> int | None:
    """Take the exclusive flock on path and write our pid into it; None if another process holds it.

    The kernel drops the lock when its holder dies, however it dies, so a file left behind by a
    killed process never blocks the next one. The lock lasts as long as the returned descriptor is
    open (children do not inherit it); the file is never removed, so no two holders can see two files.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def lock_holder(path: Path) -> int | None:
    """The pid written by the holder of a lock that hold_lock() could not take (None if not yet written)."""
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def describe(pid: int) -> str:
    """A process's command line, short enough for a one-line message: `python3 wakeful worker all`."""
    try:
        argv = psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return "gone"
    text = " ".join(Path(arg).name if arg.startswith("/") else arg for arg in argv)
    return text if len(text) <= 100 else text[:97] + "..."


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return "(no log yet)"
    return "\n".join(text.splitlines()[-lines:])


def wait_until(check: Callable[[], bool], timeout: float, interval: float = 0.25) -> bool:
    """Poll check() until it is true or timeout seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return False


def port_in_use(port: int) -> bool:
    return port_open("127.0.0.1", port)


def port_free(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:`port` now: a bind there succeeds. It fails where
    a server listens, and also where an outgoing connection holds the port as its own end, which
    port_in_use (a connect) cannot see."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


Say = Callable[[str], None]
Predicate = Callable[[psutil.Process], bool]
