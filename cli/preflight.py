"""What several commands check or share before they run: the stack is up, Redis has this code's
function library, the app's tool catalog is published, and `--replicas`."""

from __future__ import annotations

import click

from wakeful.cli.output import say
from wakeful.cli.recover_cmd import journal
from wakeful.core.settings import Settings

REPLICAS = click.option(
    "--replicas",
    default=None,
    metavar="N|ROLE=N,...",
    help="Processes per role, in one consumer group: `3` for every role, or `gate=3,executor=2`.",
)


def replicas_of(settings: Settings, text: str | None, roles: tuple[str, ...]) -> dict[str, int]:
    from wakeful.consumers.kafka import supervisor

    try:
        return supervisor.parse_replicas(text, roles, settings.partitions)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--replicas'") from None


def need_stack(settings: Settings, *, kafka: bool = True, redis: bool = True) -> None:
    """A command that needs the running stack says in one line how to start it, before it does
    anything else (never a credentials error or a client time-out)."""
    from wakeful.operate import reach

    if redis:
        reach.require_redis(settings)
    if kafka:
        reach.require_kafka(settings)


def need_functions(settings: Settings, roles: tuple[str, ...]) -> None:
    """A role that calls Redis functions stops in one line, before it consumes anything, when Redis
    lacks this code's library (each role checks with its own credential)."""
    from wakeful.state import acl, library

    for role in roles:
        if role in library.CALLERS:
            client = acl.connect(settings, role)
            try:
                library.check(client, settings)
            finally:
                client.close()


def publish_tools(settings: Settings) -> bool:
    """A worker started where the admin credential is (the local stack) publishes its app's tool
    catalog, as a deploy does (D57); roles never write authority, and a worker without the
    credential leaves it to `wakeful tools publish`. True if it changed what was published."""
    from wakeful.operate.catalog import publish_local

    changed = publish_local(settings)
    if changed:
        say(changed)
        journal(settings)
    return changed is not None
