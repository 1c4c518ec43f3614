"""What one more step of a loop costs, read-only or an effect: three bench apps of one stage each.

    wakeful bench --app wakeful.bench.steps:one     one effect call, then the task closes
    wakeful bench --app wakeful.bench.steps:reads   three read-only calls, then that effect
    wakeful bench --app wakeful.bench.steps:writes  three effect calls, then that effect

Each task makes its calls in one stage's loop (Workflow.max_steps), the rules model proposing the
tools in order. (reads - one) / 3 is what a read-only step adds to a task, (writes - one) / 3 what
an effect step adds (docs/decisions.md D63). The downstream is as cheap as one can be: each effect
is kept once per op key in the executor's memory and appended to a file in $WAKEFUL_HOME, which
the bench reads to count effects, so the figures are the runtime's cost, not a downstream's.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import redis
from pydantic import BaseModel, ConfigDict

from wakeful.bench.traffic import Effect, Plan, Send
from wakeful.core.settings import Settings
from wakeful.operate.dev_signers import REQUESTER
from wakeful.schemas import events
from wakeful.sdk import CLOSED, App, Context, Next, Refuse, Start, Tool, Workflow

WORKING = "working"
LOG = "bench-steps.log"  # one line per effect: "<task id> <op key> <epoch seconds>"


class Job(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    ref: str


class JobArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ref: str


class Step(Tool[JobArgs]):
    """A call that does nothing but be recorded: read-only, or an effect kept once per op key."""

    args, stages, description = JobArgs, (WORKING,), "One step of the bench's loop."
    booked: ClassVar[dict[str, Mapping[str, str]]] = {}
    lock: ClassVar[threading.Lock] = threading.Lock()
    path: ClassVar[Path | None] = None

    def connect(self, settings: Settings) -> None:
        type(self).path = settings.home / LOG

    def call(self, op_key: str, args: JobArgs, fence: int) -> Mapping[str, str]:
        if not self.effect:
            return {"seen": args.ref}
        with self.lock:
            if op_key not in self.booked:
                self.booked[op_key] = {"done": op_key}
                assert self.path is not None
                with self.path.open("a") as log:
                    log.write(f"{args.ref} {op_key} {datetime.now(UTC).timestamp()}\n")
            return self.booked[op_key]

    def lookup(self, op_key: str) -> Mapping[str, str] | None:
        return self.booked.get(op_key) if self.effect else None


def step(name: str, effect: bool) -> Step:
    made: Step = type(name, (Step,), {"name": name, "effect": effect})()
    return made


def start(s: Start) -> Next[Job] | Refuse:
    return Next(WORKING, Job(ref=s.task_id))


def check(ctx: Context[Job], effect: Any) -> Any:
    return effect


def done(ctx: Context[Job], tool: str, result: Mapping[str, Any]) -> Next[Job]:
    return Next(CLOSED) if tool == "finish" else Next(WORKING)


def app(name: str, before: tuple[Step, ...]) -> App:
    workflow = Workflow(
        name="steps",
        version=1,
        state=Job,
        stages={"received": (WORKING,), WORKING: (CLOSED,)},
        start=start,
        check=check,
        done=done,
        max_steps=len(before) + 1,
    )
    tools = [*before, step("finish", effect=True)]
    return App(name=name, workflows=[workflow], tools=tools, traffic="wakeful.bench.steps:traffic")


one = app("steps-one", ())
reads = app("steps-reads", tuple(step(f"read_{n}", effect=False) for n in (1, 2, 3)))
writes = app("steps-writes", tuple(step(f"write_{n}", effect=True) for n in (1, 2, 3)))


class StepsTraffic:
    share = 0.0
    second_path = "none"

    def plan(self, task_id: str, rng: random.Random, second: bool) -> Plan:
        # Effects: the finish, and each write of the writes app (counted by the bench as they land).
        return Plan([Send(REQUESTER, events.CREATE, {})], settles=CLOSED, effects=1)

    def mark(self, admin: redis.Redis) -> str:
        path = Step.path or Settings.from_env().home / LOG
        return str(path.stat().st_size if path.exists() else 0)

    def effects(self, admin: redis.Redis, after: str) -> tuple[list[Effect], str]:
        path = Step.path or Settings.from_env().home / LOG
        if not path.exists():
            return [], after
        with path.open("rb") as log:
            log.seek(int(after))
            chunk = log.read()
        whole = chunk[: chunk.rfind(b"\n") + 1]
        found = []
        for line in whole.decode().splitlines():
            task, op_key, at = line.split(" ")
            if op_key.startswith("finish:"):
                found.append(Effect(task, op_key, datetime.fromtimestamp(float(at), UTC)))
        return found, str(int(after) + len(whole))


traffic = StepsTraffic()
