"""`wakeful freeze`, `wakeful thaw`, `wakeful frozen`: the kill path (authority/freezes.py).

A freeze holds a task, a tenant, an app or the whole fleet: no new step, its events kept (held,
not refused), an effect already past its intent completed. Read live at every wake; `freeze`
returns once every live gate and executor has taken it in. `thaw` lifts it and the held wakes run.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from wakeful.authority import freezes
from wakeful.cli.app_option import checked_app
from wakeful.cli.output import emit, say
from wakeful.core.ids import DEFAULT_TENANT
from wakeful.core.settings import Settings
from wakeful.operate import kill
from wakeful.operate import release as release_task
from wakeful.operate.client import Client

NOT_TAKEN_IN = 3  # exit status: the switch is thrown, but a live role has not taken it in yet
THAW_WAIT_S = 5.0  # how long a thaw waits for the roles to take it in before it wakes held tasks


def scoped(command: Any) -> Any:
    for option in reversed(
        [
            click.option(
                "--task", "task_id", default=None, help="One task (its id as `task list` shows it)."
            ),
            click.option("--tenant", default=None, help="Every task of a tenant."),
            click.option(
                "--app", "app_name", default=None, help="Every task of an app: its name, or MODULE:ATTR."
            ),
            click.option("--all", "everything", is_flag=True, help="The whole fleet."),
            click.option("--by", required=True, help="Who throws the switch (recorded)."),
        ]
    ):
        command = option(command)
    return command


def operator(client: Client, by: str) -> None:
    """Refuse `--by` unless it names an operator: a principal with a signer key that may send
    task.reopen (operate/release.py), as for `task release` and `tools disable`."""
    if by not in release_task.operators(client.authority.snapshot(with_signers=True)):
        raise click.BadParameter(
            f"{by!r} is not an operator: no signer key of {by!r} may send task.reopen", param_hint="--by"
        )


def _operated(settings: Settings, by: str, **where: Any) -> tuple[str, Client]:
    """The scope the options name, and a client, once `by` is found to be an operator."""
    scope = _scope(**where)
    client = Client(settings)
    operator(client, by)
    return scope, client


def _scope(task_id: str | None, tenant: str | None, app_name: str | None, everything: bool) -> str:
    given = [(k, v) for k, v in (("task", task_id), ("tenant", tenant), ("app", app_name)) if v] + (
        [("all", "")] if everything else []
    )
    if len(given) != 1:
        raise click.UsageError("name exactly one of --task ID, --tenant T, --app A or --all")
    kind, name = given[0]
    if kind == "app" and ":" in name:  # MODULE:ATTR, as --app names an app elsewhere
        name = checked_app(name).name
    return freezes.scope(kind, name)


@click.command("freeze")
@scoped
@click.option("--reason", required=True, help="Why (recorded, and told to every held sender).")
@click.option(
    "--wait-s",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="How long to wait for the fleet to take it in.",
)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def freeze(settings: Settings, /, by: str, reason: str, wait_s: float, as_json: bool, **where: Any) -> None:
    """Freeze a task, a tenant, an app or the fleet: no new step, events held for the thaw."""
    scope, client = _operated(settings, by, **where)
    taken = kill.freeze(client.authority, scope, by, reason, wait_s)
    doc: dict[str, Any] = {"frozen": scope, "by": by, "reason": reason}
    doc |= {"taken_in_by": taken.done, "not_yet": taken.pending, "waited_ms": round(taken.waited_ms, 1)}
    doc["acknowledged_at"] = taken.at if not taken.pending else None
    if taken.pending:
        said = (
            f"frozen {scope}, but not yet taken in by {', '.join(taken.pending)} after {wait_s:g}s: "
            "a step one of them judged before the freeze may still begin; `wakeful frozen` shows them"
        )
    elif taken.done:
        said = f"frozen {scope}; taken in by {len(taken.done)} live roles in {taken.waited_ms:.0f} ms"
    else:
        said = f"frozen {scope}; no gate or executor is running: each takes it in when it starts"
    emit(doc, as_json, said)
    if taken.pending:
        sys.exit(NOT_TAKEN_IN)


@click.command("thaw")
@scoped
@click.option("--reason", default="thawed", show_default=True, help="Why (recorded).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def thaw(settings: Settings, /, by: str, reason: str, as_json: bool, **where: Any) -> None:
    """Lift a freeze: the held wakes of its tasks run, oldest first, and frozen steps go on."""
    scope, client = _operated(settings, by, **where)
    was, woken, _ = kill.thaw(client.authority, scope, by, reason, THAW_WAIT_S)
    doc = {"thawed": scope, "was_frozen": was, "woken": len(woken)}
    said = f"thawed {scope}; woke {len(woken)} tasks with held work" if was else f"{scope} was not frozen"
    emit(doc, as_json, said)


@click.command("frozen")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def show_frozen(settings: Settings, as_json: bool) -> None:
    """The freezes in force, the last switches thrown (who, why, when) and the live roles."""
    authority = Client(settings).authority
    frozen = {s: {"by": f.by, "reason": f.reason, "at": f.at} for s, f in authority.frozen().items()}
    taken = kill.taken_in(authority, authority.switched(), 0)
    log = authority.switch_log()
    doc = {"frozen": frozen, "log": log, "live": taken.done, "behind": taken.pending}
    lines = [f"frozen {s}: by {f['by']} at {f['at']}: {f['reason']}" for s, f in frozen.items()] or [
        "nothing frozen"
    ]
    lines += [f"  {e['at']} {e['switch']} {e['scope']} by {e['by']}: {e['reason']}" for e in log]
    lines.append(f"live roles: {', '.join(taken.done + taken.pending) or 'none'}")
    emit(doc, as_json, "\n".join(lines))


@click.command("revoke")
@click.argument("key_id", metavar="KEY")
@click.option("--by", required=True, help="Who revokes it (recorded).")
@click.option("--reason", required=True, help="Why (recorded, and named on every task it parks).")
@click.pass_obj
def revoke_signer(settings: Settings, key_id: str, by: str, reason: str) -> None:
    """Revoke a signer key now: the door refuses its events, and each task its principal started
    or approved meets its app's rule at its next wake or step (App.revoked_signer: review or
    continue). No key is registered for the principal again until `signers unrevoke`."""
    client = Client(settings)
    operator(client, by)
    principal = client.authority.revoke_signer(key_id, by, reason)
    say(f"{key_id} revoked: {principal}'s tasks meet their app's rule at their next wake")


@click.command("unrevoke")
@click.argument("principal")
@click.option("--tenant", default=DEFAULT_TENANT, show_default=True, help="The tenant it signs for.")
@click.option("--by", required=True, help="Who lifts it (recorded).")
@click.option("--reason", required=True, help="Why (recorded).")
@click.pass_obj
def unrevoke_signer(settings: Settings, principal: str, tenant: str, by: str, reason: str) -> None:
    """Lift a principal's revocation, after a look: a key may be registered for it again. Tasks it
    parked stay parked until a person reopens each."""
    client = Client(settings)
    operator(client, by)
    lifted = client.authority.unrevoke(principal, tenant, by, reason)
    say(
        f"{principal} of tenant {tenant} may be given a key again"
        if lifted
        else f"{principal} was not revoked"
    )
