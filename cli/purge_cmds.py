"""`wakeful task purge`: let finished tasks go from Redis by the app's retention (docs/retention.md)."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from wakeful.cli.app_option import app_option
from wakeful.cli.output import emit, say
from wakeful.core import ids
from wakeful.core.settings import Settings
from wakeful.operate import purge
from wakeful.operate.client import Client


def _when(_ctx: click.Context, _param: click.Parameter, value: str) -> datetime:
    """An ISO date or time; one without a zone is UTC."""
    try:
        when = datetime.fromisoformat(value)
    except ValueError as exc:
        raise click.BadParameter(
            f"{value!r} is not an ISO date or time (2026-01-31, 2026-01-31T12:00Z)"
        ) from exc
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _tenant(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not ids.TENANT_RE.fullmatch(value):
        raise click.BadParameter(f"{value[:40]!r} is not a tenant ({ids.TENANT_RE.pattern})")
    return value


@click.command("purge")
@app_option
@click.option(
    "--before",
    required=True,
    callback=_when,
    help="Only tasks whose last change is before this (ISO date or time, UTC unless it says).",
)
@click.option("--dry-run", is_flag=True, help="Say what would go (counts and examples); write nothing.")
@click.option(
    "--batch", type=click.IntRange(1, 10_000), default=500, show_default=True, help="Tasks per round trip."
)
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(0),
    default=30.0,
    show_default=True,
    help="Seconds to wait for the relay to put the tombstones on wakeful.log before their outboxes go.",
)
@click.option(
    "--tenant", default=None, callback=_tenant, help="Only this tenant's tasks (default: every tenant's)."
)
@click.option("--by", default="admin", show_default=True, help="Who purges: kept in each tombstone.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def task_purge(
    settings: Settings,
    *,
    before: datetime,
    dry_run: bool,
    batch: int,
    wait_s: float,
    tenant: str | None,
    by: str,
    as_json: bool,
) -> None:
    """Delete the Redis keys of finished tasks (the app's terminal stages and `closed`) whose last
    change is older than both --before and the app's retention (Retention.closed_tasks, 30 days
    unless the app says). A task that waits, is parked for review or is quarantined never goes. Each
    purged task leaves a tombstone on wakeful.log: `wakeful recover` does not bring it back."""
    client = Client(settings)
    report = purge.run(
        client.admin,
        client.app,
        before,
        datetime.now(UTC),
        dry_run=dry_run,
        batch=batch,
        by=by,
        wait_s=wait_s,
        tenant=tenant,
        floor=purge.replay_window(settings),
        say=say,
    )
    emit(report.as_dict(), as_json, purge.render(report))
