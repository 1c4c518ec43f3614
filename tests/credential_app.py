"""A test app whose tools are minted a bank credential per step (D120). `peek`: the model has the
read-only `peek_ledger` read the bank, then the effect `note_ledger` write a note there, then
finishes. Each run writes the credential it was handed to a file of the test's (the downstream's
side of the story: what the test then looks for everywhere else), and `note_ledger` with `hold`
waits, on its first run only, until the test lets it go, then uses its connection again: a
credential revoked or expired meanwhile has closed it, so the attempt is unavailable and the step is
settled later under a new credential (its lookup, which also writes down what it was handed, finds
the note)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

import orjson
import redis
from egress_app import RECEIVED, WORKING, Finish, Page, check, done, start
from pydantic import BaseModel, ConfigDict

from wakeful.core.settings import Settings
from wakeful.examples import bank
from wakeful.sdk import (
    CLOSED,
    App,
    Tool,
    ToolUnavailable,
    Workflow,
)
from wakeful.sdk import credential as step_credential
from wakeful.state.downstreams import task_record
from wakeful.state.stepped import as_minted

DIR_ENV = "WAKEFUL_TEST_CREDENTIALS"  # where each run writes what it was handed; the test's own
HOLD_S = 90.0


class PeekArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str


class NoteArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str
    hold: bool = False


def _handed(task_id: str, tool: str) -> Path:
    """Write down the credential this run was handed; the test's folder of the task."""
    made = step_credential()
    folder = Path(os.environ[DIR_ENV])
    line = {"tool": tool, "user": made.user, "password": made.password, "expires_ms": made.expires_ms}
    with (folder / f"{task_id}.jsonl").open("ab") as out:
        out.write(orjson.dumps(line) + b"\n")
    return folder


def note_key(task_id: str) -> str:
    return task_record(bank.TAG, "note", task_id)


class PeekLedger(Tool[PeekArgs]):
    name, args, stages, effect = "peek_ledger", PeekArgs, (WORKING,), False
    description = "Read the bank's fence for the task."
    egress = ("bank",)
    credential = "bank"

    def connect(self, settings: Settings) -> None:
        self.settings = settings

    def call(self, op_key: str, args: PeekArgs, fence: int) -> Mapping[str, str]:
        _handed(args.task_id, self.name)
        with as_minted(self.settings) as client:
            seen = client.get(bank.fence_key(args.task_id))
        return {"fence_seen": str(seen is not None)}

    def lookup(self, op_key: str) -> Mapping[str, str] | None:
        return None


class NoteLedger(Tool[NoteArgs]):
    name, args, stages = "note_ledger", NoteArgs, (WORKING,)
    description = "Write a note for the task in the bank, once, under its op key."
    egress = ("bank",)
    credential = "bank"
    attempts = 5

    def connect(self, settings: Settings) -> None:
        self.settings = settings

    def call(self, op_key: str, args: NoteArgs, fence: int) -> Mapping[str, str]:
        folder = _handed(args.task_id, self.name)
        held, go = folder / f"{args.task_id}.held", folder / f"{args.task_id}.go"
        try:
            with as_minted(self.settings) as client:
                client.set(note_key(args.task_id), op_key)
                if args.hold and not held.exists():
                    held.touch()  # the test now sees the credential at work, then ends it
                    deadline = time.monotonic() + HOLD_S
                    while not go.exists() and time.monotonic() < deadline:
                        time.sleep(0.05)
                    client.get(note_key(args.task_id))  # the same connection, after the credential ended
        except redis.RedisError as exc:
            raise ToolUnavailable(f"the bank closed the connection: {type(exc).__name__}") from exc
        return {"noted": "yes"}

    def lookup(self, op_key: str) -> Mapping[str, str] | None:
        args_task = op_key.split(":")[1]
        _handed(args_task, f"{self.name}.lookup")
        with as_minted(self.settings) as client:
            return {"noted": "yes"} if client.get(note_key(args_task)) == op_key.encode() else None


peek = Workflow(
    name="peek",
    version=1,
    state=Page,
    stages={RECEIVED: (WORKING,), WORKING: (CLOSED,)},
    start=start,
    check=check,
    done=done,
    max_steps=5,
)

app = App(name="minted", workflows=[peek], tools=[PeekLedger(), NoteLedger(), Finish()])
