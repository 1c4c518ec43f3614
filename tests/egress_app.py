"""A test app whose tool reaches the network (D116). `fetch`: the model reads pages at hosts it
names, in a loop, then finishes. `later`: the same, once its requester sends `fetch.go` (until
then it sleeps, an hour at most); `reworded` and `widened` are the app as later deploys ship it,
with fetch_page's description reworded, or its egress widened (D119). `fetch_page` declares the
egress name `pages`, which the test maps to one listener with WAKEFUL_EGRESS; it reads `host:port`
with a socket of its own, or through a process it starts (`via: process`), which can only go by the
executor's outbound proxy."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from wakeful.sdk import (
    CLOSED,
    REQUESTER,
    Accept,
    App,
    Context,
    Effect,
    Next,
    Refuse,
    Review,
    Sleep,
    Start,
    Tool,
    Workflow,
    outbound_env,
)

RECEIVED, WAITING, WORKING = "received", "waiting", "working"
GO = "fetch.go"
FETCH = "import urllib.request as u, sys; print(u.urlopen(sys.argv[1], timeout=5).read().decode())"


class Page(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    topic: str


class FetchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str
    where: str  # host:port
    via: str = "socket"


class DoneArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str


class FetchPage(Tool[FetchArgs]):
    name, args, stages, effect = "fetch_page", FetchArgs, (WORKING,), False
    description = "Read the page a host serves, at host:port."
    egress: ClassVar[tuple[str, ...]] = ("pages",)

    def call(self, op_key: str, args: FetchArgs, fence: int) -> Mapping[str, str]:
        host, _, port = args.where.rpartition(":")
        if args.via == "process":
            done = subprocess.run(
                [sys.executable, "-c", FETCH, f"http://{args.where}/"],
                env=outbound_env(),
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            return {"page": done.stdout.strip() or done.stderr.strip()[-200:]}
        try:
            with socket.create_connection((host, int(port)), timeout=5) as conn:
                conn.sendall(b"GET / HTTP/1.0\r\n\r\n")
                return {"page": conn.recv(200).decode(errors="replace").rsplit("\n", 1)[-1]}
        except OSError as exc:  # a tool that makes any failure a result: the guard still fails the step
            return {"page": f"unreachable: {exc}"}

    def lookup(self, op_key: str) -> Mapping[str, str] | None:
        return None  # read-only


class Finish(Tool[DoneArgs]):
    name, args, stages, effect = "finish", DoneArgs, (WORKING,), False
    description = "End the task."

    def call(self, op_key: str, args: DoneArgs, fence: int) -> Mapping[str, str]:
        return {"done": "yes"}

    def lookup(self, op_key: str) -> Mapping[str, str] | None:
        return None


def start(s: Start) -> Next[Page] | Refuse:
    topic = s.payload.get("topic")
    return Next(WORKING, Page(topic=topic)) if isinstance(topic, str) else Refuse("no topic")


def check(ctx: Context[Any], effect: Effect) -> Effect | Refuse | Review:
    args: Any = effect.args
    return effect if args.task_id == ctx.task_id else Review(f"the proposal names task {args.task_id}")


def done(ctx: Context[Page], tool: str, result: Mapping[str, Any]) -> Next[Page]:
    return Next(CLOSED) if tool == Finish.name else Next(WORKING)


fetch = Workflow(
    name="fetch",
    version=1,
    state=Page,
    stages={RECEIVED: (WORKING,), WORKING: (CLOSED,)},
    start=start,
    check=check,
    done=done,
    max_steps=6,
)


def start_later(s: Start) -> Next[Page] | Refuse:
    topic = s.payload.get("topic")
    if not isinstance(topic, str):
        return Refuse("no topic")
    return Next(WAITING, Page(topic=topic), sleep=Sleep(for_=timedelta(hours=1), then=CLOSED))


later = Workflow(
    name="later",
    version=1,
    state=Page,
    stages={RECEIVED: (WAITING,), WAITING: (WORKING, CLOSED), WORKING: (CLOSED,)},
    start=start_later,
    check=check,
    done=done,
    events={GO: Accept(lambda ctx: Next(WORKING), signers=(REQUESTER,))},
    max_steps=6,
)


class FetchPageReworded(FetchPage):
    description = "Read the page a host serves, at host:port, and quote it whole."


class FetchPageWidened(FetchPage):
    egress = ("pages", "127.0.0.1:9")


app = App(name="egress", workflows=[fetch, later], tools=[FetchPage(), Finish()])
reworded = App(name="egress", workflows=[fetch, later], tools=[FetchPageReworded(), Finish()])
widened = App(name="egress", workflows=[fetch, later], tools=[FetchPageWidened(), Finish()])
