"""Build the state-layer objects a role needs from the settings, once, at start-up."""

from __future__ import annotations

from wakeful.core.settings import Settings
from wakeful.sdk.app import App, load_app
from wakeful.state import acl
from wakeful.state.actions import ActionLog
from wakeful.state.lease import Leases
from wakeful.state.seal import Keyring, Sealer
from wakeful.state.store import Store
from wakeful.workflow import engine


def store_for(settings: Settings, role: str, app: App | None = None) -> Store:
    """The role's store, held to the transition tables of `app` (default: the one settings name)."""
    moves = engine.moves(app or load_app(settings.app))
    return Store(acl.connect(settings, role), Sealer(Keyring.load(settings.keyring)), moves=moves)


def leases_for(settings: Settings, role: str, owner: str | None = None) -> Leases:
    return Leases(acl.connect(settings, role), owner, ttl_ms=settings.lease_ttl_ms)


def actions_for(settings: Settings, role: str) -> ActionLog:
    return ActionLog(acl.connect(settings, role))
