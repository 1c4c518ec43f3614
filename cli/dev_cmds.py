"""`wakeful dev`: the local stack (Apache Kafka in KRaft mode and Redis on this machine), its
checks and raw-limit benches, and the provisioning commands it runs."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import click

from wakeful.cli.model_server_cmd import model_server
from wakeful.cli.output import emit, say
from wakeful.cli.preflight import need_stack
from wakeful.core.settings import Settings


@click.group()
def dev() -> None:
    """The local stack: Apache Kafka (KRaft) and Redis on this machine."""


@dev.command("up")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.option(
    "--redis-cluster",
    is_flag=True,
    help="A local 3-master Redis Cluster instead of one Redis (the same as WAKEFUL_REDIS_CLUSTER=1).",
)
@click.pass_obj
def dev_up(settings: Settings, as_json: bool, redis_cluster: bool) -> None:
    """Start Kafka and Redis (unless configured externally) and create the topics. Safe to rerun."""
    from wakeful.devstack import stack

    settings = _clustered(settings, redis_cluster)
    servers = stack.up(settings, say)
    emit([s.as_dict() for s in servers], as_json, _status_table(servers))


@dev.command("down")
@click.option(
    "--redis-cluster",
    is_flag=True,
    help="A local 3-master Redis Cluster instead of one Redis (the same as WAKEFUL_REDIS_CLUSTER=1).",
)
@click.pass_obj
def dev_down(settings: Settings, redis_cluster: bool) -> None:
    """Stop the servers that `wakeful dev up` started (by pid; nothing else is touched)."""
    from wakeful.devstack import stack

    stack.down(_clustered(settings, redis_cluster), say)


@dev.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.option(
    "--redis-cluster",
    is_flag=True,
    help="A local 3-master Redis Cluster instead of one Redis (the same as WAKEFUL_REDIS_CLUSTER=1).",
)
@click.pass_obj
def dev_status(settings: Settings, as_json: bool, redis_cluster: bool) -> None:
    """Show each server with its address, pid and health; exit 1 if one is unhealthy."""
    from wakeful.devstack import stack

    servers = stack.status(_clustered(settings, redis_cluster))
    emit([s.as_dict() for s in servers], as_json, _status_table(servers))
    if not all(s.healthy for s in servers):
        sys.exit(1)


@dev.command("fetch")
@click.pass_obj
def dev_fetch(settings: Settings) -> None:
    """Resolve the pinned Kafka jars from Maven Central into WAKEFUL_CACHE (once)."""
    from wakeful.devstack import kafka

    click.echo(str(kafka.ensure_jars(settings, say)))


@dev.command("topics")
@click.pass_obj
def dev_topics(settings: Settings) -> None:
    """Create wakeful's topics on the configured Kafka (idempotent)."""
    from wakeful.operate import topics as topic_admin

    need_stack(settings, redis=False)
    created = topic_admin.ensure_topics(settings)
    click.echo(f"created: {', '.join(created)}" if created else "all topics exist")


@dev.command("smoke")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def dev_smoke(settings: Settings, as_json: bool) -> None:
    """One Kafka produce/consume and one Redis compare-and-swap through the running stack."""
    from wakeful.devstack import smoke

    need_stack(settings)
    result = smoke.run(settings)
    emit(result, as_json, "smoke ok: " + ", ".join(f"{k}={v}" for k, v in result.items()))


@dev.command("bench-infra")
@click.option("--messages", default=200_000, show_default=True, help="Kafka messages to produce.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def dev_bench_infra(settings: Settings, messages: int, as_json: bool) -> None:
    """Print the raw limits of this stack: Kafka msgs/s, Redis latency, WATCH-CAS ops/s."""
    from wakeful.bench import infra as bench_infra

    need_stack(settings)
    result = bench_infra.run(settings, messages, say)
    emit(result, as_json, bench_infra.render(result))


@dev.command("bench-hops")
@click.option(
    "--hops", default=4, show_default=True, type=click.IntRange(1, 16), help="Processes in the chain."
)
@click.option(
    "--trips", default=3, show_default=True, type=click.IntRange(0, 50), help="Redis round trips per hop."
)
@click.option("--tasks", default=1000, show_default=True, type=click.IntRange(1), help="Messages to send.")
@click.option("--rate", type=click.FloatRange(min=0.1), help="Offered load in tasks/s (default: flat out).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def dev_bench_hops(
    settings: Settings, *, hops: int, trips: int, tasks: int, rate: float | None, as_json: bool
) -> None:
    """Print what a task's hops cost this box with no wakeful code between them: the floor under
    `wakeful bench`'s box CPU per task."""
    from wakeful.bench import hops as bench_hops

    need_stack(settings)
    result = bench_hops.run(settings, say, hops=hops, trips=trips, tasks=tasks, rate=rate)
    emit(result, as_json, bench_hops.render(result))


@dev.command("acl")
@click.option(
    "--apply",
    is_flag=True,
    help="Create the users on the configured Redis as its admin, and load wakeful's function library.",
)
@click.pass_obj
def dev_acl(settings: Settings, apply: bool) -> None:
    """The ACL users for every role (ACL SETUSER lines); --apply creates them on your own Redis."""
    from wakeful.state import acl, credentials, library, upgrades

    if apply:
        need_stack(settings, kafka=False)
    moved = credentials.migrate(settings)
    if moved:
        say(moved)
    users = acl.users(settings)
    commands = acl.setuser_commands({role: credentials.ensure(settings, role) for role in users}, users)
    kept = f"{settings.secrets}/<role>/{credentials.NAME}.json (mode 0600, one folder per role)"
    if not apply:
        for command in commands:
            click.echo(" ".join(command))
        say(f"passwords are kept in {kept}; hashes only above; --apply also loads {library.LIBRARY}")
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
    say(f"created {len(commands)} ACL users and loaded {library.LIBRARY}; their passwords are in {kept}")


@dev.command("functions")
@click.pass_obj
def dev_functions(settings: Settings) -> None:
    """Load (or replace) wakeful's Redis function library as the admin. `dev up` and `dev acl --apply`
    do it too; compose runs it once Redis is up."""
    from wakeful.state import acl, library

    need_stack(settings, kafka=False)
    click.echo(f"loaded {library.load(acl.connect(settings, 'admin'), settings)}")


@dev.command("kafka-acl")
@click.option("--apply", is_flag=True, help="Create the users and ACLs on the configured Kafka as its admin.")
@click.pass_obj
def dev_kafka_acl(settings: Settings, apply: bool) -> None:
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


def _clustered(settings: Settings, redis_cluster: bool) -> Settings:
    """The settings with the Redis Cluster flag given on the command line (it only adds)."""
    return dataclasses.replace(settings, redis_cluster=True) if redis_cluster else settings


def _status_table(servers: list[Any]) -> str:
    rows = [f"{'server':8} {'address':32} {'managed':9} {'pid':>8}  health"]
    for s in servers:
        pid = str(s.pid) if s.pid else "-"
        rows.append(f"{s.name:8} {s.address:32} {s.managed:9} {pid:>8}  {'ok' if s.healthy else 'DOWN'}")
    return "\n".join(rows)


dev.add_command(model_server)
