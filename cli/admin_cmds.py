"""`wakeful admin`: provisioning a real deployment (D96): each role's Redis ACL user, the Redis
function library, each role's Kafka SCRAM user and ACLs, and the topics. `wakeful dev up` runs the
same steps on the local stack."""

from __future__ import annotations

import click

from wakeful.cli.output import say
from wakeful.cli.preflight import need_stack
from wakeful.core.settings import Settings


@click.group()
def admin() -> None:
    """Provision a deployment: Redis ACL users and functions, Kafka ACLs, topics."""


@admin.command("acl")
@click.option(
    "--apply",
    is_flag=True,
    help="Create the users on the configured Redis as its admin, and load wakeful's function library.",
)
@click.pass_obj
def admin_acl(settings: Settings, apply: bool) -> None:
    """The ACL users for every role (ACL SETUSER lines); --apply creates them on your own Redis."""
    from wakeful.state import acl, credentials, library, upgrades

    if apply:
        need_stack(settings, kafka=False)
    moved = credentials.migrate(settings)
    if moved:
        say(moved)
    users = acl.users(settings)
    commands = acl.setuser_commands({role: credentials.ensure(settings, role) for role in users}, users)
    # A downstream whose users are all minted per step has no static one: one made before goes (D125).
    commands += [["ACL", "DELUSER", acl.user_name(d)] for d in acl.minted_only(settings)]
    kept = f"{settings.secrets}/<role>/{credentials.NAME}.json (mode 0600, one folder per role)"
    if not apply:
        for command in commands:
            click.echo(" ".join(command))
        say(f"passwords are kept in {kept}; hashes only above; --apply also loads {library.LIBRARY}")
        if old := [str(p) for p in credentials.retired(settings)]:
            say(f"--apply also removes {', '.join(old)}: those downstreams' users are minted per step (D125)")
        return
    # On your own Redis, as whoever WAKEFUL_REDIS_URL logs in as: wakeful-admin may not exist yet.
    owner = acl.connect(settings, "admin") if settings.runs_local_redis else acl.client(settings)
    # A Redis Cluster keeps users per node: every node, replicas too, is given every user.
    where = {"target_nodes": "all"} if acl.is_cluster(owner) else {}
    for command in commands:
        owner.execute_command(*command, **where)  # type: ignore[no-untyped-call]  # untyped upstream
    library.load(owner, settings)
    for line in upgrades.run(owner):
        say(line)
    for gone in credentials.retire(settings):  # once their users are gone from Redis
        say(f"removed {gone}: its downstream's users are minted per step (D125)")
    say(f"created {len(users)} ACL users and loaded {library.LIBRARY}; their passwords are in {kept}")


@admin.command("functions")
@click.pass_obj
def admin_functions(settings: Settings) -> None:
    """Load (or replace) wakeful's Redis function library as the admin. `wakeful dev up` and `wakeful
    admin acl --apply` do it too; compose runs it once Redis is up."""
    from wakeful.state import acl, library

    need_stack(settings, kafka=False)
    click.echo(f"loaded {library.load(acl.connect(settings, 'admin'), settings)}")


@admin.command("kafka-acl")
@click.option("--apply", is_flag=True, help="Create the users and ACLs on the configured Kafka as its admin.")
@click.pass_obj
def admin_kafka_acl(settings: Settings, apply: bool) -> None:
    """The SCRAM user of every role and the ACLs of core/kafka_rights.py; --apply creates them on
    your own Kafka (WAKEFUL_KAFKA_BOOTSTRAP), logged in as $WAKEFUL_SECRETS/admin/kafka.json."""
    from wakeful.operate import kafka_acl

    for line in kafka_acl.plan(settings):
        click.echo(line)
    if not apply:
        say("nothing changed; --apply creates them (passwords are made once, each in its role's kafka.json)")
        return
    need_stack(settings, redis=False)
    kafka_acl.apply(settings, say)


@admin.command("topics")
@click.pass_obj
def admin_topics(settings: Settings) -> None:
    """Create wakeful's topics on the configured Kafka (idempotent)."""
    from wakeful.operate import topics as topic_admin

    need_stack(settings, redis=False)
    created = topic_admin.ensure_topics(settings)
    click.echo(f"created: {', '.join(created)}" if created else "all topics exist")
