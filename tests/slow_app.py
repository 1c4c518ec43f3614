"""A test-only app whose one tool takes as long as its task says: for the lease's heartbeat and
the retry of an unavailable tool (tests/test_lease_heartbeat.py; docs/decisions.md D61).

Its downstream is a JSON-lines file in $WAKEFUL_HOME that every executor process shares (under an
flock), one row per thing that happened: a call began (`start`, with its fence and pid), was
refused for an older fence than one already seen for its op key (`fenced`), found the downstream
down (`unavailable`, while the task's `outage` lasts), did its effect (`done`, once per op key), or
undid it (`undone`, once per op key: a cancel undoes the call, Workflow.undo_on_cancel).
A call checks the fence when it begins and again, after its hold, before its effect: a late call
whose lease another worker took is refused then.

    wakeful worker all --app slow_app:app       (tests/ on PYTHONPATH)
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from wakeful.core.settings import Settings
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
    Start,
    Tool,
    Wait,
    Workflow,
)
from wakeful.sdk.tools import ToolFenced, ToolUnavailable

READY, CONFIRMING, CONFIRM = "ready", "confirming", "slow.confirm"
ROWS = "slow-tool.jsonl"
POLICY = """
permit (principal, action in [Action::"create", Action::"amend", Action::"run", Action::"reopen"], resource);
permit (principal, action == Action::"slow_pay", resource);
"""


class Hold(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    hold_s: float = Field(ge=0, le=300)  # how long the tool's call takes
    outage: int = Field(default=0, ge=0)  # how many calls first find the downstream down
    confirm: bool = False  # after the call, wait for a slow.confirm from the requester: a second step


class HoldArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str
    hold_s: float
    outage: int = 0


def rows_path(home: Path) -> Path:
    return home / ROWS


def read_rows(home: Path) -> list[dict[str, Any]]:
    path = rows_path(home)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class SlowPay(Tool[HoldArgs]):
    name = "slow_pay"
    args = HoldArgs
    description = "Pay once, slowly: the call takes the task's hold_s seconds."
    stages = (READY,)
    op_key = "SLOW:{task_id}:v{version}"
    egress = ("slowbank",)
    reversible = True

    def connect(self, settings: Settings) -> None:
        self.home = settings.home

    def call(self, op_key: str, args: HoldArgs, fence: int) -> Mapping[str, str]:
        with self._locked() as rows:
            done = self._admit(rows, op_key, fence)
            if done is not None:
                return done
            if sum(r["event"] == "unavailable" and r["op_key"] == op_key for r in rows) < args.outage:
                self._add("unavailable", op_key, fence)
                raise ToolUnavailable("slowbank is down")
            self._add("start", op_key, fence)
        time.sleep(args.hold_s)  # a stopped process resumes past this at once
        with self._locked() as rows:
            done = self._admit(rows, op_key, fence)
            if done is not None:
                return done
            receipt = f"rc-{op_key}-{fence}"
            self._add("done", op_key, fence, receipt=receipt)
            return {"receipt": receipt}

    def lookup(self, op_key: str) -> Mapping[str, str] | None:
        with self._locked() as rows:
            done = [r for r in rows if r["event"] == "done" and r["op_key"] == op_key]
        return {"receipt": done[0]["receipt"]} if done else None

    def undo(self, op_key: str, args: HoldArgs, fence: int) -> Mapping[str, str]:
        with self._locked() as rows:
            if not any(r["event"] == "undone" and r["op_key"] == op_key for r in rows):
                self._add("undone", op_key, fence)
        return {"undone": op_key}

    def _admit(self, rows: list[dict[str, Any]], op_key: str, fence: int) -> Mapping[str, str] | None:
        """What an earlier call under op_key did, if one did; ToolFenced for a fence older than one
        already seen for it."""
        mine = [r for r in rows if r["op_key"] == op_key]
        if any(r["fence"] > fence for r in mine if r["event"] == "start"):
            self._add("fenced", op_key, fence)
            raise ToolFenced(f"fence {fence} is older than one already seen for {op_key}")
        done = [r for r in mine if r["event"] == "done"]
        return {"receipt": done[0]["receipt"]} if done else None

    @contextmanager
    def _locked(self) -> Iterator[list[dict[str, Any]]]:
        with (self.home / f"{ROWS}.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield read_rows(self.home)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _add(self, event: str, op_key: str, fence: int, **more: str) -> None:
        row = {"event": event, "op_key": op_key, "fence": fence, "pid": os.getpid(), **more}
        with rows_path(self.home).open("a") as out:
            out.write(json.dumps(row) + "\n")


def start(s: Start) -> Next[Hold] | Refuse:
    try:
        return Next(
            READY, Hold.model_validate({k: v for k, v in s.payload.items() if k in Hold.model_fields})
        )
    except ValueError as exc:
        return Refuse(f"not a hold: {exc}")


def check(ctx: Context[Hold], effect: Effect) -> Effect | Refuse | Review:
    args = effect.args
    assert isinstance(args, HoldArgs)
    if (args.task_id, args.hold_s, args.outage) != (ctx.task_id, ctx.state.hold_s, ctx.state.outage):
        return Review("the proposed call is not the one on record")
    return effect


def paid(ctx: Context[Hold], tool: str, result: Mapping[str, Any]) -> Next[Hold]:
    refs = {"receipt": str(result["receipt"])}
    if ctx.state.confirm:
        return Next(CONFIRMING, refs=refs, wait=Wait(CONFIRM, (REQUESTER,), timedelta(hours=1)))
    return Next(CLOSED, refs=refs)


slow = Workflow(
    name="slow_call",
    version=1,
    state=Hold,
    stages={"received": (READY,), READY: (CONFIRMING, CLOSED), CONFIRMING: (CLOSED,)},
    start=start,
    check=check,
    done=paid,
    events={CONFIRM: Accept(lambda ctx: Next(CLOSED), signers=(REQUESTER,))},
    undo_on_cancel=(SlowPay.name,),
)

app = App(name="slow", workflows=[slow], tools=[SlowPay()], policy=POLICY)
