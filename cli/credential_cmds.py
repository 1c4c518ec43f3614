"""`wakeful authority credentials ...`: the per-step credentials the minter made for tools (D120),
listed by the step they were made for, and revoked: a revoked credential's Redis user is removed,
which also closes every connection it opened, so a call using it stops at once."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from wakeful.cli.kill_cmds import operator
from wakeful.cli.output import emit, say
from wakeful.core.log import Log
from wakeful.core.settings import Settings
from wakeful.operate.client import Client
from wakeful.state import minted

_LOG = Log(role="admin")


@click.group("credentials")
def credentials() -> None:
    """The credentials minted for tools' steps: list them, revoke them.

    A tool that declares `credential = "<downstream>"` is given a Redis user of that downstream for
    each call, lookup and undo, removed when the run ends, or at the latest WAKEFUL_CREDENTIAL_TTL_S
    after it was made."""


@credentials.command("list")
@click.option("--task", "task_id", default=None, help="Only those of this task's steps.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def credentials_list(settings: Settings, /, task_id: str | None, as_json: bool) -> None:
    """Each credential not yet removed: its user, the step it was made for, when it ends."""
    found = minted.listing(Client(settings).admin, task_id)
    lines = []
    for r in found:
        ends = datetime.fromtimestamp(int(r["expires_ms"]) / 1000, UTC).isoformat(timespec="seconds")
        step = f"{r['task_id']}  {r['op_key']}  fence {r['fence']}"
        lines.append(f"{r['user']}  {r['scope']}  {r['tool']}  {step}  ends {ends}")
    emit(found, as_json, "\n".join(lines) or "no credential is minted now")


@credentials.command("revoke")
@click.argument("users", nargs=-1)
@click.option("--task", "task_id", default=None, help="Every credential of this task's steps.")
@click.option("--all", "every", is_flag=True, help="Every credential minted now.")
@click.option("--by", required=True, help="The operator who revokes (a signer that may send task.reopen).")
@click.option("--reason", default="", help="Why: logged.")
@click.pass_obj
def credentials_revoke(
    settings: Settings, /, users: tuple[str, ...], task_id: str | None, every: bool, by: str, reason: str
) -> None:
    """End credentials now: the USERS named, those of --task T, or --all. A step whose credential
    is revoked mid-call fails that attempt and is tried again later with a new one, if its task may."""
    if sum((bool(users), task_id is not None, every)) != 1:
        raise click.UsageError("name the USERS, or --task T, or --all")
    client = Client(settings)
    operator(client, by)
    chosen = list(users) if users else minted.of(client.admin, task_id)
    # a Kafka token's record removed: its minter expires it at its next pass (D123)
    removed = minted.end(client.admin, chosen, minted.tokens_among(chosen))
    _LOG("authority.credentials_revoked", users=chosen[:50], count=len(chosen), by=by, reason=reason)
    say(f"revoked {len(chosen)} credential(s); {removed} user(s) removed from Redis")
