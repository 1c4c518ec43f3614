"""`wakeful release rollout | promote | rollback` (D122): a workflow's new version goes to some
tenants, or a share of new tasks, first; promoted, to more or to all; rolled back, new tasks start
on the version before, and sleeping tasks meet gate 4's rule at their next step. The rules are
workflow/rollouts.py; the record is kept in the authority store (`wk:authority:app:{A}:rollouts`),
and every gate takes a change in at its next wake."""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import UTC, datetime
from typing import Any

import click

from wakeful.authority.kept import moved
from wakeful.cli import owner_gate
from wakeful.cli.app_option import checked_app
from wakeful.cli.output import emit
from wakeful.cli.release_cmds import release
from wakeful.cli.signoff_cmds import APP  # importing it adds propose, sign and show to the group
from wakeful.core import ids
from wakeful.core.errors import ConfigError
from wakeful.core.settings import Settings
from wakeful.operate.client import Client
from wakeful.sdk.app import App
from wakeful.sdk.workflow import Workflow
from wakeful.state import keys
from wakeful.workflow import rollouts
from wakeful.workflow.changes import ROLLOUT, Change
from wakeful.workflow.rollouts import ROLLED_BACK, ROLLING, Rollout

__all__ = ["release"]

WORKFLOW = click.option("--workflow", help="The workflow (default: the app's one workflow).")
BY = click.option("--by", required=True, help="The operator (kept in the rollout's history).")


@release.command("rollout")
@APP
@WORKFLOW
@click.option("--tenant", "tenants", multiple=True, help="A tenant whose tasks get the new version (repeat).")
@click.option("--share", type=click.FloatRange(0, 1), default=0.0, help="The share of new tasks (0 to 1).")
@BY
@click.option("--reason", required=True, help="Why, kept in the rollout's history.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def rollout_cmd(
    settings: Settings, spec: str, workflow: str | None, tenants: tuple[str, ...], share: float,
    by: str, reason: str, as_json: bool,
) -> None:  # fmt: skip
    """Start the new version of a workflow of SPEC for --tenant (each) and --share of new tasks;
    every other task starts on the version before, which the app keeps (App.retired)."""
    if not tenants and not share:
        raise ConfigError("--tenant/--share", "name a tenant or a share of new tasks to roll out to")
    _tenants(tenants)
    app = checked_app(spec)
    wf, stable = _versions(app, workflow)
    made = Rollout(wf.version, stable, tuple(sorted(set(tenants))), share, ROLLING, by, _now(), reason)
    _signed(settings, app, wf, {"tenants": list(made.tenants), "share": made.share})
    _put(settings, app, wf, _logged(made, "rollout", by, made.said()), as_json)


@release.command("promote")
@APP
@WORKFLOW
@click.option("--tenant", "tenants", multiple=True, help="Another tenant to give the new version (repeat).")
@click.option("--share", type=click.FloatRange(0, 1), default=None, help="A larger share of new tasks.")
@click.option("--all", "everyone", is_flag=True, help="Every tenant: the rollout ends.")
@BY
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def promote(
    settings: Settings, spec: str, workflow: str | None, tenants: tuple[str, ...], share: float | None,
    everyone: bool, by: str, as_json: bool,
) -> None:  # fmt: skip
    """Widen a rollout: more tenants, a larger share, or --all (the record is removed: every new task
    starts on the new version, and sleeping tasks meet gate 4's rule at their next step)."""
    app = checked_app(spec)
    wf, _ = _versions(app, workflow)
    now = _stored(settings, app, wf)
    if now is None:
        raise ConfigError(
            "--workflow", f"no rollout of {wf.name} v{wf.version}: start one with `wakeful release rollout`"
        )
    if everyone:
        _signed(settings, app, wf, {"all": True})
        client = Client(settings)
        client.admin.hdel(keys.auth_rollouts(app.name), wf.name)
        moved(client.admin)
        emit({"workflow": wf.name, "version": wf.version, "rollout": None}, as_json,
             f"{wf.name} v{wf.version} for every tenant: the rollout ended")  # fmt: skip
        return
    if not tenants and share is None:
        raise ConfigError("--tenant/--share/--all", "name what the rollout widens to")
    _tenants(tenants)
    wider = Rollout(
        wf.version, now.stable, tuple(sorted({*now.tenants, *tenants})), max(now.share, share or 0.0),
        ROLLING, by, _now(), now.reason, now.history,
    )  # fmt: skip
    _signed(settings, app, wf, {"tenants": list(wider.tenants), "share": wider.share})
    _put(settings, app, wf, _logged(wider, "promote", by, wider.said()), as_json)


@release.command("rollback")
@APP
@WORKFLOW
@BY
@click.option("--reason", required=True, help="Why, kept in the rollout's history.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def rollback(
    settings: Settings, spec: str, workflow: str | None, by: str, reason: str, as_json: bool
) -> None:
    """Take a workflow's new version back: every new task starts on the version before; a sleeping
    task of the new version goes on under it (kept: gate 4 never moves a task back)."""
    app = checked_app(spec)
    wf, stable = _versions(app, workflow)
    now = _stored(settings, app, wf) or Rollout(wf.version, stable)
    back = Rollout(wf.version, now.stable, (), 0.0, ROLLED_BACK, by, _now(), reason, now.history)
    _put(settings, app, wf, _logged(back, "rollback", by, reason), as_json)


def _tenants(named: tuple[str, ...]) -> None:
    if bad := [t for t in named if not ids.TENANT_RE.fullmatch(t)]:
        raise ConfigError("--tenant", f"{', '.join(repr(t[:70]) for t in bad)}: a tenant is {ids.TENANT}")


def _versions(app: App, name: str | None) -> tuple[Workflow[Any], int]:
    """The workflow named (or the app's one) and the newest version before its current that the
    app keeps: what every task not rolled out to runs."""
    names = [wf.name for wf in app.workflows]
    if name is None and len(names) != 1:
        raise ConfigError("--workflow", f"app {app.name} runs {', '.join(names)}: name one")
    wf = app.workflow(name or names[0])
    if wf is None:
        raise ConfigError("--workflow", f"app {app.name} runs no workflow {name!r} ({', '.join(names)})")
    before = [v for n, v in app.kept_versions() if n == wf.name and v < wf.version]
    if not before:
        raise ConfigError(
            "App.retired",
            f"{wf.name} v{wf.version} keeps no version before it: a rollout runs the rest on the one "
            "before, so keep it (App(retired=[...]))",
        )
    return wf, max(before)


def _stored(settings: Settings, app: App, wf: Workflow[Any]) -> Rollout | None:
    raw = Client(settings).admin.hget(keys.auth_rollouts(app.name), wf.name)
    found = rollouts.decode(raw) if raw is not None else None
    return found if found is not None and found.version == wf.version else None


def _signed(settings: Settings, app: App, wf: Workflow[Any], value: dict[str, Any]) -> None:
    """For an app with owners: they signed widening the new version to this (D124), over the
    rollout as it stands. A rollback needs no sign-off: it returns to the version they signed before."""
    raw = Client(settings).admin.hget(keys.auth_rollouts(app.name), wf.name)
    after = hashlib.sha256(raw).hexdigest() if isinstance(raw, bytes) else ""
    change = Change(app.name, ROLLOUT, {"workflow": wf.name, "version": wf.version, **value, "after": after})
    owner_gate.require(settings, Client(settings), change, app)


def _logged(made: Rollout, action: str, by: str, what: str) -> Rollout:
    return dataclasses.replace(made, history=(*made.history, f"{made.at} {action} by {by}: {what}"))


def _put(settings: Settings, app: App, wf: Workflow[Any], made: Rollout, as_json: bool) -> None:
    client = Client(settings)
    client.admin.hset(keys.auth_rollouts(app.name), wf.name, made.encode())
    moved(client.admin)  # every gate reads it at its next wake
    emit({"workflow": wf.name, **dataclasses.asdict(made)}, as_json, f"{wf.name}: {made.said()}")


def _now() -> str:
    return datetime.now(UTC).isoformat()
