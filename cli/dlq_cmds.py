"""`wakeful dlq list | show | replay`: the dead letters of wakeful.dlq, read as the admin, and an
operator's replay of one after its cause is fixed (docs/dlq.md, docs/decisions.md D71)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

import click

from wakeful.cli.memory.view import TIME_HELP, moment
from wakeful.cli.output import emit, say
from wakeful.core.errors import WakefulError
from wakeful.core.settings import Settings
from wakeful.operate.client import Client
from wakeful.operate.dlq import bulk as dlq_bulk
from wakeful.operate.dlq import codes as letter_codes
from wakeful.operate.dlq.read import DlqReader, Letter
from wakeful.operate.dlq.replay import Replayer
from wakeful.state.replays import Replay, ReplayStore
from wakeful.workflow import replays
from wakeful.workflow.replays import EventInput, TaskInput, Unreplayable

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
REASON_CHARS = 60  # of a letter's reason on its line


@click.group()
def dlq() -> None:
    """The dead letters of wakeful.dlq: list, show, and replay one after its cause is fixed."""


@dlq.command("list")
@click.option("--source", default=None, help="Only letters this role wrote (inbound, gate, proposer, ...).")
@click.option("--task", "task_id", default=None, help="Only letters about this task.")
@click.option(
    "--limit", default=100, show_default=True, type=click.IntRange(min=1), help="The last N that match."
)
@json_option
@click.pass_obj
def dlq_list(settings: Settings, source: str | None, task_id: str | None, limit: int, as_json: bool) -> None:
    """One line per letter, oldest first, read from the earliest offsets to the end as of now: its
    id, when, the role that wrote it, its task, its code, its reason, what a replay would send, and
    its replays."""
    history = ReplayStore(Client(settings).admin).history()
    reader = DlqReader(settings)
    try:
        found = [
            letter
            for letter in reader.every(lambda read, total: say(f"read {read} of {total} letters ..."))
            if _matches(letter, source, task_id)
        ][-limit:]
    finally:
        reader.close()
    docs = [_summary(letter, history.get(letter.id, [])) for letter in found]
    emit(docs, as_json, "\n".join(_line(d) for d in docs) or "no dead letters match")


@dlq.command("show")
@click.argument("letter_id", metavar="ID")
@json_option
@click.pass_obj
def dlq_show(settings: Settings, letter_id: str, as_json: bool) -> None:
    """One letter whole, decoded, with how it would be replayed now and its replays."""
    client, reader = Client(settings), DlqReader(settings)
    try:
        letter = reader.one(letter_id)
        plan, task = Replayer(client, reader).plan(letter)
    finally:
        reader.close()
    doc = {
        **_summary(letter, ReplayStore(client.admin).of(letter.id)),
        "letter": letter.letter.model_dump(mode="json") if letter.letter else None,
        "plan": {"action": getattr(plan, "action", "none"), "task": task, "why": getattr(plan, "reason", "")},
    }
    emit(doc, as_json, _shown(doc))


@dlq.command("replay")
@click.argument("letter_id", metavar="[ID]", required=False)
@click.option(
    "--code", default=None, help="Every letter of this code (as `dlq list` shows it); with --since."
)
@click.option("--since", default=None, help=f"With --code: letters written from this time on ({TIME_HELP}).")
@click.option(
    "--until",
    default=None,
    help=f"With --code: letters written before this time (default: now; {TIME_HELP}).",
)
@click.option("--by", required=True, help="The operator: a principal whose key may send event.replay.")
@click.option("--reason", default="", help="Why: kept in the replay's record.")
@click.option("--dry-run", is_flag=True, help="Say what the replay would do; write and send nothing.")
@click.option("--again", is_flag=True, help="Replay a letter replayed before (its event is still deduped).")
@json_option
@click.pass_obj
def dlq_replay(
    settings: Settings,
    letter_id: str | None,
    code: str | None,
    since: str | None,
    until: str | None,
    by: str,
    reason: str,
    dry_run: bool,
    again: bool,
    as_json: bool,
) -> None:
    """Send a letter's input again through the door it came through, re-verified: an upstream
    event to wakeful.events (inside the operator's signed wrapper once past its max age), a
    runtime message's task woken for the gate to judge afresh. Recorded; refused when replayed
    before unless --again. With --code and --since instead of an ID: every letter of that code
    written in [--since, --until), each replayed the same way; exit 1 unless all are done."""
    if letter_id is None:
        return _replay_bulk(settings, (code, since, until), by, reason, dry_run, again, as_json)
    if code is not None or since is not None or until is not None:
        raise click.UsageError("name one letter ID, or --code C --since T [--until T]: not both")
    client, reader = Client(settings), DlqReader(settings)
    try:
        done = Replayer(client, reader).replay(letter_id, by, reason, dry_run=dry_run, again=again)
    finally:
        reader.close()
    doc = done.as_dict()
    what = doc["event"] or f"task {doc['task']}"
    verb = "would be" if dry_run else "was"
    emit(doc, as_json, f"letter {done.letter.id} {verb} replayed: {done.record.action} {what}")


def _replay_bulk(
    settings: Settings,
    chosen: tuple[str | None, str | None, str | None],
    by: str,
    reason: str,
    dry_run: bool,
    again: bool,
    as_json: bool,
) -> None:
    code, since, until = chosen
    if code is None or since is None:
        raise click.UsageError("name a letter ID, or every letter of a code: --code C --since T [--until T]")
    try:
        wanted = letter_codes.known(code)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--code") from None
    try:
        span = letter_codes.window(
            moment(since, "--since"), None if until is None else moment(until, "--until"), datetime.now(UTC)
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--until") from None
    client, reader = Client(settings), DlqReader(settings)
    replayer = Replayer(client, reader)
    try:
        replayer.operator(by)  # before the topic is read: a --by that may not replay stops here
        letters = dlq_bulk.select(
            reader.every(lambda read, total: say(f"read {read} of {total} letters ...")), wanted, span
        )
        if not letters:
            raise WakefulError(
                f"no letter of code {wanted} was written in [{span[0].isoformat()}, {span[1].isoformat()}): "
                "`wakeful dlq list --json` shows each letter's code and when it was written"
            )
        summary = dlq_bulk.Summary(wanted, span[0], span[1], dry_run)
        dlq_bulk.replay_all(replayer, letters, summary, by, reason, again=again, progress=say)
    finally:
        reader.close()
    emit(summary.as_dict(), as_json, summary.said())
    if not summary.all_done:
        say(
            f"error: not every letter is replayed ({summary.counts()}): fix what the skipped and failed "
            "say, then run the same command again (what was replayed is skipped)"
        )
        sys.exit(1)


def _matches(letter: Letter, source: str | None, task_id: str | None) -> bool:
    found = letter.letter
    if source is not None and (found is None or found.source != source):
        return False
    return task_id is None or (found is not None and task_id in (found.task_id, _task_in(letter)))


def _task_in(letter: Letter) -> str | None:
    if letter.letter is None:
        return None
    found = replays.subject(letter.letter)
    if isinstance(found, TaskInput):
        return found.task_id
    return found.event.task_id if isinstance(found, EventInput) else None


def _summary(letter: Letter, history: list[Replay]) -> dict[str, Any]:
    found = letter.letter
    doc: dict[str, Any] = {
        "id": letter.id,
        "written": letter.written.isoformat() if letter.written else None,
        "source": found.source if found else None,
        "task": found.task_id if found else None,
        "reason": found.reason if found else letter.problem,
        "code": dlq_bulk.code_of(letter),
        "replayable": _replayable(letter),
        "replays": [r.__dict__ for r in history],
    }
    return doc


def _replayable(letter: Letter) -> str:
    """What a replay would send, judged from the letter alone (`show` reads the live facts too)."""
    if letter.letter is None:
        return f"no: {letter.problem}"
    found = replays.subject(letter.letter)
    if isinstance(found, Unreplayable):
        return f"no: {found.reason}"
    return "event" if isinstance(found, EventInput) else "wake task"


def _line(doc: dict[str, Any]) -> str:
    replayed = doc["replays"][-1] if doc["replays"] else None
    last = f"replayed by {replayed['by']} at {replayed['at'][:19]}" if replayed else "not replayed"
    can = doc["replayable"] if not doc["replayable"].startswith("no:") else "no"
    when = (doc["written"] or "-")[:19]
    return (
        f"{doc['id']:<10}  {when:19}  {doc['source'] or '?':9} {doc['task'] or '-':24} {doc['code']:13} "
        f"{_short(doc['reason'] or ''):{REASON_CHARS}}  replay: {can}; {last}"
    )


def _short(text: str) -> str:
    """One line of at most REASON_CHARS characters."""
    line = " ".join(text.split())
    return line if len(line) <= REASON_CHARS else line[: REASON_CHARS - 3] + "..."


def _shown(doc: dict[str, Any]) -> str:
    rows = [f"letter {doc['id']} written {doc['written'] or '-'}", f"  source: {doc['source'] or '?'}"]
    rows += [f"  task: {doc['task'] or '-'}", f"  code: {doc['code']}", f"  reason: {doc['reason']}"]
    letter = doc["letter"]
    if letter is not None:
        rows += [
            f"  from: {letter['topic']}:{letter['partition']}:{letter['offset']}",
            f"  sha256: {letter['sha256']}",
        ]
        rows.append(f"  input: {'digest only' if letter['digest'] else letter['raw']}")
    plan = doc["plan"]
    rows.append(
        f"  replay: cannot: {plan['why']}"
        if plan["action"] == "none"
        else f"  replay: {plan['action']} {plan['task']}"
    )
    rows += [f"  replayed: {r['action']} by {r['by']} at {r['at']}: {r['reason']}" for r in doc["replays"]]
    return "\n".join(rows)
