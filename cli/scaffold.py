"""`wakeful new-agent NAME`: a starting app on the SDK and unit tests of its decisions.

The app works as written (received -> ready -> closed, one tool, called once per op key), and its
tests pass as written; docs/agents.md explains each piece. Existing files are never overwritten.
"""

from __future__ import annotations

import keyword
import re
import sys
from pathlib import Path
from string import Template

import click

from wakeful.cli.output import say

NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
# Class names the generated module already uses: its state model may not take one of them.
TAKEN = frozenset(
    {
        *("Any", "App", "BaseModel", "ConfigDict", "Context", "Effect", "Field", "Mapping", "Next"),
        *("Record", "RecordArgs", "Refuse", "Review", "Settings", "Start", "Tool", "ValidationError"),
        "Workflow",
    }
)

APP = Template('''"""$name: an app on wakeful's SDK.

    PYTHONPATH=. wakeful worker all --app $name:app

received -> ready -> closed: the task is ready at once, the model proposes the one tool, the
executor runs it once under its op key, and `done` closes the task. docs/agents.md explains each
piece: add a Wait for an approval or an outside event, and a check of your own.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from wakeful.core.settings import Settings
from wakeful.sdk import (
    CLOSED,
    App,
    Context,
    Effect,
    Next,
    Refuse,
    Review,
    Start,
    Tool,
    Workflow,
)

RECEIVED, READY = "received", "ready"


class $state(BaseModel):
    """The business state: what the task is about. Add your own fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    subject: str = Field(min_length=1, max_length=200)


class RecordArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str
    subject: str


class Record(Tool[RecordArgs]):
    """A stand-in for your real system: one JSON line per op key in $$WAKEFUL_HOME. A real tool
    passes op_key to its system as the idempotency key, and looks the outcome up by it."""

    name = "record"
    args = RecordArgs
    description = "Record the task's subject, once, under its op key."
    stages = (READY,)
    op_key = "$op:{task_id}:v{version}"
    egress = ("$name",)

    def connect(self, settings: Settings) -> None:
        self.path, self.lock = settings.home / "$name-records.jsonl", threading.Lock()

    def call(self, op_key: str, args: RecordArgs, fence: int) -> Mapping[str, str]:
        with self.lock:
            if self._rows().get(op_key) is None:  # at most once per op key, even when called again
                with self.path.open("a") as out:
                    out.write(json.dumps({"op_key": op_key, "subject": args.subject}) + "\\n")
        return {"record": op_key}

    def lookup(self, op_key: str) -> Mapping[str, str] | None:
        with self.lock:
            return {"record": op_key} if op_key in self._rows() else None

    def _rows(self) -> dict[str, dict[str, str]]:
        lines = self.path.read_text().splitlines() if self.path.exists() else []
        return {row["op_key"]: row for row in map(json.loads, lines)}


def start(s: Start) -> Next[$state] | Refuse:
    try:
        fields = {k: v for k, v in s.payload.items() if k in $state.model_fields}
        state = $state.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        return Refuse(f"not a $name task: {first['loc'][0]}: {first['msg']}")
    return Next(READY, state)


def check(ctx: Context[$state], effect: Effect) -> Effect | Refuse | Review:
    """The model only proposes: what it proposed must be what the task says."""
    args = effect.args
    assert isinstance(args, RecordArgs)
    if (args.task_id, args.subject) != (ctx.task_id, ctx.state.subject):
        return Review(f"proposed subject {args.subject!r} is not the one on record")
    return effect


def done(ctx: Context[$state], tool: str, result: Mapping[str, Any]) -> Next[$state]:
    return Next(CLOSED, refs={"record": str(result["record"])})


workflow = Workflow(
    name="$name",
    version=1,
    state=$state,
    stages={RECEIVED: (READY,), READY: (CLOSED,)},
    start=start,
    check=check,
    done=done,
)

app = App(name="$name", workflows=[workflow], tools=[Record()])
''')

TESTS = Template('''"""$name's decisions as plain functions: no Kafka, no Redis.

Run them with `python test_$name.py` (no test runner needed), or `python -m pytest test_$name.py`.
"""

from __future__ import annotations

import inspect
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from wakeful.authority.snapshot import Snapshot
from wakeful.core.settings import Settings
from wakeful.sdk import CLOSED, Context, Next, Refuse, Review, Start

from $name import (
$imported)

NOW = datetime(2030, 1, 1, tzinfo=UTC)
AUTH = Snapshot(approvers=frozenset({"alice"}), limit=0)


def begin(**payload: object) -> Next[$state] | Refuse:
    return start(Start("t-1", "requester", "default", payload, AUTH, NOW))


def ready(subject: str = "first") -> Context[$state]:
    return Context(
        task_id="t-1",
        stage=READY,
        version=1,
        state=$state(subject=subject),
        requester="requester",
        tenant="default",
        approval=None,
        waits=(),
        refs={},
        auth=AUTH,
        now=NOW,
        op_key=lambda tool: f"{tool}:t-1:v1",
    )


def test_a_task_with_a_subject_starts_ready() -> None:
    assert begin(subject="first") == Next(READY, $state(subject="first"))


def test_a_task_without_a_subject_is_refused() -> None:
    refused = begin(other="x")
    assert isinstance(refused, Refuse) and "subject" in refused.reason


def test_the_proposal_on_record_runs_and_another_goes_to_review() -> None:
    ctx = ready()
    effect = ctx.effect("record", RecordArgs(task_id="t-1", subject="first"))
    assert check(ctx, effect) is effect
    other = ctx.effect("record", RecordArgs(task_id="t-1", subject="second"))
    assert isinstance(check(ctx, other), Review)


def test_done_closes_the_task_with_its_record() -> None:
    assert done(ready(), "record", {"record": "R"}) == Next(CLOSED, refs={"record": "R"})


def test_the_tool_records_once_per_op_key(tmp_path: Path) -> None:
    tool = Record()
    tool.connect(Settings.from_env({"WAKEFUL_HOME": str(tmp_path)}))
    assert tool.lookup("$op:t-1:v1") is None
    args = RecordArgs(task_id="t-1", subject="first")
    assert tool.call("$op:t-1:v1", args, 1) == tool.call("$op:t-1:v1", args, 2)
    assert tool.lookup("$op:t-1:v1") == {"record": "$op:t-1:v1"}
    assert len(tool.path.read_text().splitlines()) == 1


def test_the_app_offers_its_tool_where_the_task_is_ready_under_one_key_per_version() -> None:
    assert [t.name for t in app.tools_at(READY)] == ["record"]
    assert Record().key_for("t-1", 2) == "$op:t-1:v2"


def run_here() -> int:
    """Every test above, in order, without pytest: a fresh folder for each that asks for tmp_path."""
    tests = [f for n, f in list(globals().items()) if n.startswith("test_") and callable(f)]
    failed = 0
    for test in tests:
        wants = inspect.signature(test).parameters
        try:
            test(**({"tmp_path": Path(tempfile.mkdtemp())} if "tmp_path" in wants else {}))
            print(f"ok    {test.__name__}")
        except Exception as exc:  # a failed assert, or anything else the test raised
            failed += 1
            print(f"FAIL  {test.__name__}: {exc!r}")
    print(f"{len(tests) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(run_here())
''')


def problem(name: str) -> str | None:
    """Why `name` cannot name a new agent's module, or None."""
    if not NAME.fullmatch(name):
        return f"{name!r} is not a module name: lowercase letters, digits and _, starting with a letter"
    if keyword.iskeyword(name) or name in sys.stdlib_module_names or name in ("wakeful", "test"):
        return f"{name!r} would shadow Python's own {name!r}; choose another name"
    if _state(name) in TAKEN:
        return f"{name!r} would name its state {_state(name)}, which the module already uses"
    return None


def _state(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def render(name: str) -> dict[str, str]:
    """File name -> text of the new agent's module and its tests."""
    state = _state(name)
    imported = ["READY", *sorted(["Record", "RecordArgs", state]), "app", "check", "done", "start"]
    listed = "".join(f"    {n},\n" for n in imported)
    names = {"name": name, "state": state, "op": name.upper(), "imported": listed}
    return {f"{name}.py": APP.substitute(names), f"test_{name}.py": TESTS.substitute(names)}


@click.command("new-agent")
@click.argument("name")
@click.option(
    "--dir",
    "folder",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(),
    show_default=True,
    help="Folder to write NAME.py and test_NAME.py in.",
)
def new_agent(name: str, folder: Path) -> None:
    """Write NAME.py (a working app: state, start, one tool, done) and test_NAME.py (its tests)."""
    refused = problem(name)
    if refused is not None:
        raise click.BadParameter(refused, param_hint="NAME")
    files = {folder / file: text for file, text in render(name).items()}
    existing = [str(path) for path in files if path.exists()]
    if existing:
        raise click.ClickException(f"{', '.join(existing)} already exist; nothing was written")
    folder.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        with path.open("x") as out:  # "x": never overwrite, even one created a moment ago
            out.write(text)
    say(f"wrote {', '.join(str(p) for p in files)}")
    say(f"test it:  python {folder / f'test_{name}.py'}   (or python -m pytest, where pytest is installed)")
    say(f"run it:   PYTHONPATH={folder} wakeful worker all --app {name}:app")
