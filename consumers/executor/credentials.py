"""The executor's per-step credentials (D120): it starts its minter (consumers/minter) as a child
when a tool of its app declares `credential = "<downstream>"`, asks it for one credential per call,
lookup and undo of such a tool, hands it to that run alone (sdk `credential()`), and says when the
run ended so that the credential is removed at once.

A minter that is gone is started again; one that does not answer, or will not mint, makes the
attempt unavailable (ToolUnavailable): the step is tried again later, as for a downstream that is
down, and fails for good after the tool's attempts."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from wakeful.consumers.kafka.supervisor import PARENT_PID_ENV
from wakeful.core.errors import ConfigError
from wakeful.core.grants import Grant
from wakeful.core.log import Log
from wakeful.core.minting import SOCKET_ENV, Credential, Minter, MintRefused, handed
from wakeful.core.settings import Settings
from wakeful.sdk.app import App
from wakeful.sdk.tools import Tool, ToolUnavailable
from wakeful.state import acl

READY_S = 30.0  # how long a starting minter may take to listen
_minter: Minter | None = None
_forker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wakeful-minter-spawn")


class _Child:
    """The minter process, listening on a socket in a directory of its own."""

    def __init__(self, log: Log) -> None:
        self.path = os.path.join(tempfile.mkdtemp(prefix="wakeful-minter-"), "minter.sock")
        self.log, self._lock = log, threading.Lock()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self._lock:
            if self.process is not None and self.process.poll() is None:
                return
            env = {**os.environ, PARENT_PID_ENV: str(os.getpid()), SOCKET_ENV: self.path}
            argv = [sys.executable, "-m", "wakeful.consumers.minter"]
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            # forked from one thread that lives as long as the process: the kernel's parent-death
            # signal follows the thread that forked (consumers/kafka/supervisor.py says why)
            self.process = _forker.submit(subprocess.Popen, argv, env=env).result()  # output: ours
            deadline = time.monotonic() + READY_S
            while not os.path.exists(self.path):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise MintRefused(f"the minter did not start (exit {self.process.poll()})")
                time.sleep(0.02)
            self.log("executor.minter_started", pid=self.process.pid)


def start(settings: Settings, app: App, log: Log) -> None:
    """Start the minter if any tool declares a credential; a credential naming no downstream of the
    stack stops the executor at start, naming every such tool."""
    global _minter  # noqa: PLW0603 -- one minter per executor process
    scoped = {tool.name: tool.credential for tool in app.tools if tool.credential}
    if not scoped:
        return
    known = {d.user for d in acl.downstreams_of(settings)}
    if bad := [f"{t} declares {c!r}" for t, c in scoped.items() if c not in known]:
        raise ConfigError(
            "credential", f"{'; '.join(bad)}: a credential names a downstream ({', '.join(sorted(known))})"
        )
    child = _Child(log)
    child.start()
    _minter = Minter(child.path, child.start)


@contextlib.contextmanager
def minted(tool: Tool[Any], task_id: str, op_key: str | None, fence: int) -> Iterator[Credential | None]:
    """The credential of one run of `tool` for this step, handed to the code run inside (None for a
    tool that declares none); removed when the run ends, however it ends."""
    if not tool.credential or op_key is None:
        yield None
        return
    if _minter is None:
        raise ToolUnavailable(f"{tool.name} declares a credential and this executor runs no minter")
    try:
        made = _minter.mint(Grant(tool.credential, tool.name, task_id, op_key, fence, tool.effect))
    except MintRefused as exc:
        raise ToolUnavailable(str(exc)) from exc
    try:
        with handed(made):
            yield made
    finally:
        _minter.end(made.user)
