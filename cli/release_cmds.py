"""`wakeful release check`: before a deploy, what gate 4 would do to every stored task under the new
app (workflow/release.py), read from Redis as the admin, with nothing written. `wakeful task release`:
after one, a person lets a task gate 4 quarantined go on (operate/release.py)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import click
import orjson

from wakeful.cli.app_option import app_option, checked_app
from wakeful.cli.output import emit
from wakeful.cli.task_cmds import task_id_argument
from wakeful.core.settings import Settings
from wakeful.operate import release as release_task
from wakeful.operate.client import Client, describe
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk.app import App
from wakeful.state.wording import Wordings
from wakeful.workflow import release as dry_run
from wakeful.workflow import release_digest, wording

PROGRESS_EVERY = 1000  # tasks read between progress lines on stderr
SHOWN = 20  # tasks listed per outcome in the text output (--json lists every one)


@click.group()
def release() -> None:
    """Check a new app against the stored tasks before you deploy it."""


@release.command("check")
@click.option("--app", "spec", required=True, metavar="MODULE:ATTR", help="The app you are about to deploy.")
@click.option(
    "--task",
    "task_ids",
    multiple=True,
    callback=lambda ctx, param, values: tuple(task_id_argument(ctx, param, v) for v in values),
    help="Only this task (repeat for more); default: every stored task.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON: counts, then every task's forecast.")
@click.pass_obj
def check(settings: Settings, spec: str, task_ids: tuple[str, ...], as_json: bool) -> None:
    """Say what gate 4 would do to each stored task (or each --task) at its next wake under the app
    SPEC (pin, migrate, quarantine...), by the live authority's rules, and how its tools' wording
    differs from the deployed one (a description's diff, egress gained or lost). Writes nothing;
    fails (exit 1) when a gate or executor of SPEC would refuse to start: a widened egress that
    App.refresh does not name."""
    _, data, counts, forecasts, unreadable = report(settings, spec, task_ids)
    emit(data, as_json, _human(counts, forecasts, unreadable, [*data["changes"], *data["tools"]]))
    if refused := data["refused_at_deploy"]:
        raise click.ClickException(
            f"a deploy of {spec} is refused: {'; '.join(refused)}: name each tool in App(refresh=[...])"
        )


def report(
    settings: Settings, spec: str, task_ids: tuple[str, ...] = ()
) -> tuple[App, dict[str, Any], Any, Any, Any]:
    """What `check` says of the app `spec`: (the app, the report, and its parts for the text)."""
    app = checked_app(spec)
    client = Client(settings)
    auth = client.authority.snapshot(app=app.name, shipped=app.shipped_policy)
    forecasts: list[dry_run.Forecast] = []
    unreadable: list[dict[str, str]] = []
    for read, (task_id, found) in enumerate(client.stored(task_ids), start=1):
        if isinstance(found, Checkpoint):
            forecasts.append(dry_run.forecast(found, auth, app))
        elif isinstance(found, dict):  # quarantined: no wake reaches gate 4
            detail = f"quarantined: {found.get('reason', '')} {found.get('detail', '')}".strip()
            forecasts.append(dry_run.Forecast(task_id, "", 0, "quarantined", "ended", detail))
        else:
            unreadable.append({"id": task_id, "error": str(found)})
        if read % PROGRESS_EVERY == 0:
            click.echo(f"read {read} tasks ...", err=True)
    counts = dry_run.tally(forecasts)
    stored = Wordings(client.admin, app.name)
    current = stored.current()
    before = wording.Read(stored.raw)(current) if current else None
    data: dict[str, Any] = {
        "app": spec,
        "release": release_digest.digest(app),  # what its owners sign (D121)
        "counts": [
            {"workflow": wf, "version": version, "outcome": outcome, "tasks": n}
            for (wf, version), by in counts.items()
            for outcome, n in sorted(by.items())
        ],
        "tasks": [asdict(f) for f in sorted(forecasts, key=lambda f: f.task_id)],
        "unreadable": unreadable,
        "tools": wording.changes(app, before),  # the wording against the deployed: a reviewer's diff
        # the release against the one deployed last: workflows, scopes, egress, code (D121)
        "changes": _changes(_deployed(stored), release_digest.parts(app)),
        # what a gate or executor of this app will not start with
        "refused_at_deploy": wording.widened(app, before),
    }
    return app, data, counts, forecasts, unreadable


def _changes(before: dict[str, Any] | None, after: dict[str, Any]) -> list[str]:
    try:
        return release_digest.changes(before, after)
    except (TypeError, AttributeError, KeyError):  # recorded in another shape: planted or damaged
        return ["the release deployed last is recorded in a shape this build cannot read: no diff"]


def _deployed(stored: Wordings) -> dict[str, Any] | None:
    raw = stored.deployed_release()
    try:
        found = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:  # a value planted or damaged: nothing to diff against
        return None
    return found if isinstance(found, dict) else None


def _human(
    counts: dict[tuple[str, int], Any],
    forecasts: list[dry_run.Forecast],
    unreadable: list[dict[str, str]],
    tools: list[str],
) -> str:
    lines = [
        *tools,
        *(
            (f"{wf} v{version}: " if wf else "quarantined before: ")
            + ", ".join(f"{by[o]} {o}" for o in dry_run.OUTCOMES if by[o])
            for (wf, version), by in counts.items()
        ),
    ]
    for outcome in ("quarantine", "no-workflow", "pin", "migrate"):
        these = sorted((f for f in forecasts if f.outcome == outcome), key=lambda f: f.task_id)
        lines += [f"  {outcome:11} {f.task_id}: {f.detail}" for f in these[:SHOWN]]
        if len(these) > SHOWN:
            lines.append(f"  {outcome:11} ... and {len(these) - SHOWN} more (--json lists every task)")
    lines += [f"  unreadable  {u['id']}: {u['error']}" for u in unreadable[:SHOWN]]
    if len(unreadable) > SHOWN:
        lines.append(f"  unreadable  ... and {len(unreadable) - SHOWN} more (--json lists every task)")
    total = len(forecasts) + len(unreadable)
    lines.append(f"{total} tasks read ({len(unreadable)} unreadable); nothing was written")
    return "\n".join(lines)


@click.command("release")
@app_option
@click.argument("task_id", callback=task_id_argument)
@click.option(
    "--to-version",
    type=click.IntRange(min=1),
    required=True,
    help="The workflow version it goes on under: the deployed one (migrated) or its own (re-pinned).",
)
@click.option("--by", "by", required=True, help="The operator releasing it (holds a task.reopen signer key).")
@click.option("--reason", required=True, help="Why it may go on; kept in the task's history.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def task_release(
    settings: Settings, task_id: str, to_version: int, by: str, reason: str, as_json: bool
) -> None:
    """Let a task that gate 4 quarantined go on, after a look (`task show` reads it): migrated to the
    deployed workflow version, or re-pinned to its own. Recorded with who and why; its next event
    or deadline wakes it."""
    client = Client(settings)
    auth = client.authority.snapshot(with_signers=True)
    cp = release_task.release(
        client.store, client.app, auth, task_id, to_version=to_version, by=by, reason=reason
    )
    shown = describe(cp)
    emit(
        shown,
        as_json,
        f"released {task_id}: workflow {cp.business.workflow} v{cp.business.workflow_version}, "
        f"stage {cp.stage}, by {by}",
    )
