"""Build the state-layer objects a role needs from the settings, once, at start-up."""

from __future__ import annotations

from typing import Any

from wakeful.core.settings import Settings
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk.app import App, load_app
from wakeful.state import acl
from wakeful.state.actions import ActionLog
from wakeful.state.last_step import Shows
from wakeful.state.lease import Leases
from wakeful.state.seal import Keyring, Sealer
from wakeful.state.store import Store
from wakeful.workflow import engine, views


def store_for(settings: Settings, role: str, app: App | None = None) -> Store:
    """The role's store, held to the transition tables of `app` (default: the one settings name),
    whose every change carries what the task shows by `app`'s views and attributes: every role
    that writes a checkpoint builds its store here, so no change leaves the index a stale view."""
    app = app or load_app(settings.app)
    client = acl.connect(settings, role)
    return Store(client, Sealer(Keyring.load(settings.keyring)), moves=engine.moves(app), shown=shows(app))


def shows(app: App) -> Shows:
    """workflow/views.shown(app), as the plain data the state layer takes."""
    show = views.shown(app)

    def pair(cp: Checkpoint) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        found = show(cp)
        return found.views, found.attributes

    return pair


def leases_for(settings: Settings, role: str, owner: str | None = None) -> Leases:
    return Leases(acl.connect(settings, role), owner, ttl_ms=settings.lease_ttl_ms)


def actions_for(settings: Settings, role: str) -> ActionLog:
    return ActionLog(acl.connect(settings, role))
