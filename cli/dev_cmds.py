"""`wakeful dev`: the local stack (Apache Kafka in KRaft mode and Redis on this machine), its
checks and raw-limit benches, and the old names of the provisioning commands now under `admin`."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import click

from wakeful.cli.admin_cmds import admin
from wakeful.cli.model_server_cmd import model_server
from wakeful.cli.moved import keep_old_names
from wakeful.cli.output import emit, say
from wakeful.cli.preflight import need_stack
from wakeful.core.settings import Settings

REDIS_CLUSTER = click.option(
    "--redis-cluster",
    is_flag=True,
    help="A local 3-master Redis Cluster instead of one Redis (the same as WAKEFUL_REDIS_CLUSTER=1).",
)


@click.group()
def dev() -> None:
    """The local stack: Apache Kafka (KRaft) and Redis on this machine."""


@dev.command("up")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@REDIS_CLUSTER
@click.pass_obj
def dev_up(settings: Settings, as_json: bool, redis_cluster: bool) -> None:
    """Start Kafka and Redis (unless configured externally) and create the topics. Safe to rerun."""
    from wakeful.devstack import stack

    settings = _clustered(settings, redis_cluster)
    servers = stack.up(settings, say)
    emit([s.as_dict() for s in servers], as_json, _status_table(servers))


@dev.command("down")
@REDIS_CLUSTER
@click.pass_obj
def dev_down(settings: Settings, redis_cluster: bool) -> None:
    """Stop the servers that `wakeful dev up` started (by pid; nothing else is touched)."""
    from wakeful.devstack import stack

    stack.down(_clustered(settings, redis_cluster), say)


@dev.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@REDIS_CLUSTER
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
# Provisioning moved to `wakeful admin` (D96); its old names here still run it, saying so.
MOVED_TO_ADMIN = ("acl", "kafka-acl", "topics", "functions")
keep_old_names(dev, "wakeful dev", admin, "wakeful admin", MOVED_TO_ADMIN)
