"""A chat-completions server on 127.0.0.1 for tests: it answers each request with the next scripted
reply (the last one repeats) and records every request it receives, headers and body."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from wakeful.devstack.model_server import ChatServer, Reply, Request, completion

Step = Reply | Callable[[Request], Reply]
HOLD_S = 30.0  # the longest a held reply waits for the test to let it go
HOLD = Reply(599)  # a step whose reply does not come until the test ends (for time-outs)


class Script:
    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.requests: list[Request] = []
        self.released = threading.Event()  # lets held replies go when the test ends
        self._lock = threading.Lock()

    def __call__(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
            step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        if step is HOLD:
            self.released.wait(HOLD_S)
            return Reply(500, {"error": {"message": "released"}})
        return step(request) if callable(step) else step

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests]


@contextmanager
def serving(*steps: Step) -> Iterator[tuple[ChatServer, Script]]:
    script = Script(*steps)
    server = ChatServer(script).start()
    try:
        yield server, script
    finally:
        script.released.set()
        server.stop()


def call(name: str, args: Any, text: str | None = "the step the card describes") -> Reply:
    """A 200 reply that makes one tool call."""
    return Reply(body=completion("m", text, [(name, args)], tokens=(120, 30)))


def calls(*made: tuple[str, Any]) -> Reply:
    return Reply(body=completion("m", None, list(made)))


def text(said: str) -> Reply:
    """A 200 reply that only talks."""
    return Reply(body=completion("m", said, None))


def task_of(request: Request) -> str:
    """The task a chat-completions request asks about, from its task card."""
    from wakeful.consumers.proposer.messages import read_back

    return str(read_back(request.body)["task_card"]["task_id"])


def tool_messages(body: dict[str, Any]) -> list[str]:
    """The `tool` messages of a request: each earlier call's result, in order."""
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


@dataclass
class Scripted:
    """Worker processes whose proposer asks a scripted server, and what the server was asked."""

    script: Script
    fleet: Any  # wakeful.devstack.fleet.Fleet

    def asked(self, task_id: str) -> list[dict[str, Any]]:
        """The bodies of the chat-completions requests about `task_id`, in order."""
        chats = (r for r in self.script.requests if r.path == "/v1/chat/completions")
        return [r.body for r in chats if task_of(r) == task_id]


@contextmanager
def scripted_fleet(steps: Step, app: str, **env: str) -> Iterator[Scripted]:
    """Worker processes of `app` whose proposer asks a scripted chat-completions server answering
    with `steps`, with `env` besides (e.g. WAKEFUL_LEASE_TTL_MS)."""
    import os

    from cli_run import with_tests_on_path

    from wakeful.devstack.fleet import Fleet

    with serving(steps) as (server, script):
        settings = {
            **with_tests_on_path(dict(os.environ)),
            "WAKEFUL_APP": app,
            "WAKEFUL_MODEL": "openai",
            "WAKEFUL_MODEL_URL": server.url,
            "WAKEFUL_MODEL_NAME": "scripted",
            **env,
        }
        fleet = Fleet(settings).start()
        try:
            yield Scripted(script, fleet)
        finally:
            fleet.stop()
