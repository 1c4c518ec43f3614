"""A local deploy's tool catalog: where the admin credential is (the local stack), what starts the
workers publishes the app's tool catalog, as a deploy does (D57). Roles never write authority; a
worker started by a supervisor or a fleet leaves this to its parent, which did it once before it
started any (D102)."""

from __future__ import annotations

from wakeful.core import secrets
from wakeful.core.settings import Settings


def publish_local(settings: Settings) -> str | None:
    """Publish the app's catalog if this state dir holds the admin credential: what changed, in one
    line to say (the caller then journals authority), or None when nothing did or there is no
    credential to publish with."""
    from wakeful.operate.client import DEPLOYER, Client

    if not secrets.exists(settings, "admin", "redis"):
        return None
    client = Client(settings)
    try:
        if not client.publish_tools(DEPLOYER):
            return None
        return f"published app {client.app.name}'s tool catalog {client.app.catalog}"
    finally:
        client.close()


def publish_and_journal(settings: Settings) -> str | None:
    """publish_local, then, if that changed the catalog, a sealed copy of authority on
    wakeful.authority: what a fleet does before it starts its roles, as `worker all` does."""
    from wakeful.operate.client import Client
    from wakeful.operate.recover import run as recovery

    changed = publish_local(settings)
    if changed is None:
        return None
    client = Client(settings)
    try:
        recovery.journal_authority(settings, client.admin, client.store.sealer)
    finally:
        client.close()
    return changed
