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
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from wakeful.consumers.kafka.supervisor import PARENT_PID_ENV
from wakeful.core import secrets
from wakeful.core.errors import ConfigError, MissingCredential
from wakeful.core.grants import Grant
from wakeful.core.log import Log
from wakeful.core.minting import SOCKET_ENV, Credential, Minter, MintRefused, handed
from wakeful.core.settings import Settings
from wakeful.sdk.app import App
from wakeful.sdk.tools import Tool, ToolUnavailable
from wakeful.state import acl, downstreams

READY_S = 30.0  # how long a starting minter may take to listen
MINTER = "minter"  # its Redis login's role name (state/acl.py)
_minter: Minter | None = None
_child: _Child | None = None
_forker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wakeful-minter-spawn")


class _Child:
    """The minter process, listening on a socket in a directory of its own."""

    def __init__(self, settings: Settings, log: Log) -> None:
        self.path = os.path.join(tempfile.mkdtemp(prefix="wakeful-minter-"), "minter.sock")
        self.serves = _settings_env(settings)  # the store it mints in, and for which app
        self.env = {**os.environ, **self.serves, PARENT_PID_ENV: str(os.getpid()), SOCKET_ENV: self.path}
        self.log, self._lock = log, threading.Lock()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self._lock:
            if self.process is not None and self.process.poll() is None:
                return
            argv = [sys.executable, "-m", "wakeful.consumers.minter"]
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            # forked from one thread that lives as long as the process: the kernel's parent-death
            # signal follows the thread that forked (consumers/kafka/supervisor.py says why)
            self.process = _forker.submit(subprocess.Popen, argv, env=self.env).result()  # output: ours
            deadline = time.monotonic() + READY_S
            while not os.path.exists(self.path):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise MintRefused(f"the minter did not start (exit {self.process.poll()})")
                time.sleep(0.02)
            self.log("executor.minter_started", pid=self.process.pid)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # it removes what it made, then exits
            self.process.wait(READY_S)


def _settings_env(settings: Settings) -> dict[str, str]:
    """What the minter reads of the executor's settings, which need not be its environment's."""
    found = {
        "WAKEFUL_HOME": str(settings.home),
        "WAKEFUL_SECRETS": str(settings.secrets),
        "WAKEFUL_REDIS_URL": settings.redis_url,
        "WAKEFUL_DOWNSTREAMS": settings.downstreams,
        "WAKEFUL_CREDENTIAL_TTL_S": str(settings.credential_ttl_s),
        # the cluster a Kafka downstream's tokens are made in (D123)
        "WAKEFUL_KAFKA_PORT": str(settings.kafka_port),
        "WAKEFUL_KAFKA_SECURITY": settings.kafka_security,
        "WAKEFUL_KAFKA_SASL_MECHANISM": settings.kafka_sasl_mechanism,
    }
    if settings.kafka_bootstrap_external:
        found["WAKEFUL_KAFKA_BOOTSTRAP"] = settings.kafka_bootstrap_external
    if settings.app:  # else the environment's, or the bundled app, as for the executor
        found["WAKEFUL_APP"] = settings.app
    if settings.redis_cluster:
        found["WAKEFUL_REDIS_CLUSTER"] = "1"
    if settings.allow_default_user:
        found["WAKEFUL_ALLOW_DEFAULT_USER"] = "1"
    return found


def start(settings: Settings, app: App, log: Log) -> None:
    """Start the minter if any tool declares a credential (the one already started for the same
    store is kept). A credential naming no downstream of the stack, or no password for the
    minter's login, stops the executor at start, naming every such tool or the file."""
    global _minter, _child  # one minter per executor process
    scoped = {tool.name: tool.credential for tool in app.tools if tool.credential}
    if not scoped:
        return
    known = {d.user for d in acl.downstreams_of(settings)} | {
        d.name for d in downstreams.kafka(settings.downstreams)
    }
    if bad := [f"{t} declares {c!r}" for t, c in scoped.items() if c not in known]:
        raise ConfigError(
            "credential", f"{'; '.join(bad)}: a credential names a downstream ({', '.join(sorted(known))})"
        )
    if not secrets.exists(settings, MINTER, "redis") and not settings.allow_default_user:
        where = secrets.path(settings, MINTER, "redis")
        raise MissingCredential(
            MINTER, f"no Redis credential for the minter at {where}: `wakeful dev up` makes it"
        )
    child = _Child(settings, log)
    if _child is not None:
        if _child.serves == child.serves and _child.process is not None and _child.process.poll() is None:
            shutil.rmtree(os.path.dirname(child.path), ignore_errors=True)
            return
        _child.stop()
    child.start()
    _minter, _child = Minter(child.path, child.start), child


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
