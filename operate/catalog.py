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
