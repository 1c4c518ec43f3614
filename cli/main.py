"""The one CLI: `wakeful`. Settings are read once here and handed down."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

import click
from redis.exceptions import ConnectionError as RedisConnectionError

from wakeful.cli import audit_cmds
from wakeful.cli.app_option import app_option
from wakeful.cli.authority_cmds import authority, signers
from wakeful.cli.dlq_cmds import dlq
from wakeful.cli.ingress_cmd import bench_ingress, ingress
from wakeful.cli.kill_cmds import freeze, revoke_signer, show_frozen, thaw, unrevoke_signer
from wakeful.cli.memory.commands import memory
from wakeful.cli.model_server_cmd import model_server
from wakeful.cli.ops_cmd import ops
from wakeful.cli.output import emit, say
from wakeful.cli.purge_cmds import task_purge
from wakeful.cli.recover_cmd import CHANGES_AUTHORITY, backup, journal, recover
from wakeful.cli.release_cmds import release, task_release
from wakeful.cli.scaffold import new_agent
from wakeful.cli.task_cmds import ledger, task
from wakeful.cli.tools_cmds import tools
from wakeful.consumers.kafka.supervisor import METRICS_PORT_ENV, ROLES
from wakeful.core.errors import WakefulError
from wakeful.core.settings import Settings


@click.group()
@click.pass_context
def cli(ctx: click.Context) -> None:
    """wakeful: durable, safe long-running agent tasks on Kafka and Redis."""
    ctx.obj = Settings.from_env()
    if ctx.invoked_subcommand in CHANGES_AUTHORITY:
        # After a command that may have changed authority, however it ends (a freeze not yet
        # taken in exits non-zero): its sealed copy on Kafka (D70).
        settings = ctx.obj
        ctx.call_on_close(lambda: journal(settings))


@cli.group()
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

    _need_stack(settings, redis=False)
    created = topic_admin.ensure_topics(settings)
    click.echo(f"created: {', '.join(created)}" if created else "all topics exist")


@dev.command("smoke")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def dev_smoke(settings: Settings, as_json: bool) -> None:
    """One Kafka produce/consume and one Redis compare-and-swap through the running stack."""
    from wakeful.devstack import smoke

    _need_stack(settings)
    result = smoke.run(settings)
    emit(result, as_json, "smoke ok: " + ", ".join(f"{k}={v}" for k, v in result.items()))


@dev.command("bench-infra")
@click.option("--messages", default=200_000, show_default=True, help="Kafka messages to produce.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def dev_bench_infra(settings: Settings, messages: int, as_json: bool) -> None:
    """Print the raw limits of this stack: Kafka msgs/s, Redis latency, WATCH-CAS ops/s."""
    from wakeful.bench import infra as bench_infra

    _need_stack(settings)
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

    _need_stack(settings)
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
        _need_stack(settings, kafka=False)
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

    _need_stack(settings, kafka=False)
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
    _need_stack(settings, redis=False)
    kafka_acl.apply(settings, say)


@cli.group()
def keys() -> None:
    """The sealing keyring (WAKEFUL_KEYRING)."""


@keys.command("rotate")
@click.option("--id", "kid", default=None, help="Id of the new key (default: generated).")
@click.pass_obj
def keys_rotate(settings: Settings, kid: str | None) -> None:
    """Add a new active key; old keys stay so every stored blob stays readable."""
    from wakeful.state.seal import Keyring

    ring = Keyring.load(settings.keyring).rotated(kid)
    ring.save(settings.keyring)
    click.echo(f"active key is now {ring.active}; keys: {', '.join(ring.kids)}")
    say("restart the workers so they load it; blobs are re-sealed with it as tasks move")


keys.add_command(audit_cmds.keys_export)  # the public keys an offline audit needs (D72)
keys.add_command(audit_cmds.keys_rotate_log)
cli.add_command(audit_cmds.audit_cmd)
cli.add_command(audit_cmds.log_group)


@keys.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def keys_list(settings: Settings, as_json: bool) -> None:
    """Key ids in the keyring and which one seals new blobs (never the keys)."""
    from wakeful.state.seal import Keyring

    ring = Keyring.load(settings.keyring)
    emit(
        {"active": ring.active, "kids": ring.kids},
        as_json,
        f"active: {ring.active}; keys: {', '.join(ring.kids)}",
    )


REPLICAS = click.option(
    "--replicas",
    default=None,
    metavar="N|ROLE=N,...",
    help="Processes per role, in one consumer group: `3` for every role, or `gate=3,executor=2`.",
)


def _replicas(settings: Settings, text: str | None, roles: tuple[str, ...]) -> dict[str, int]:
    from wakeful.consumers.kafka import supervisor

    try:
        return supervisor.parse_replicas(text, roles, settings.partitions)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--replicas'") from None


@cli.command("bench")
@app_option
@click.option("--tasks", default=1000, show_default=True, help="Tasks to run through the pipeline.")
@click.option("--approval-ratio", default=0.3, show_default=True, help="Share of tasks above the limit.")
@click.option(
    "--rate", type=float, default=None, help="Offered load in tasks/s (default: as fast as possible)."
)
@REPLICAS
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also draw tasks/s over time and the latency distribution to this PNG (needs matplotlib).",
)
@click.option(
    "--tracing",
    is_flag=True,
    help="Run the roles with tracing on, exporting over OTLP/HTTP to a receiver the bench runs (D75).",
)
@click.option(
    "--idle",
    type=click.FloatRange(min=1),
    default=None,
    metavar="SECONDS",
    help="Run no tasks: report an idle fleet's CPU share per process over SECONDS, with Kafka's and Redis's.",
)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def bench(
    settings: Settings,
    *,
    tasks: int,
    approval_ratio: float,
    rate: float | None,
    replicas: str | None,
    plot: Path | None,
    tracing: bool,
    idle: float | None,
    as_json: bool,
) -> None:
    """Throughput, wake-to-effect latency, CPU per task on the whole box (roles, Kafka and Redis),
    Redis round trips, Kafka messages and memory per role; or, with --idle, what a fleet with
    nothing to do costs."""
    from wakeful.bench import pipeline as bench_pipeline

    if idle is not None:
        from wakeful.bench import box as bench_box

        found = bench_box.idle(settings, idle, say)
        emit(found, as_json, bench_box.render_idle(found))
        return
    counts = _replicas(settings, replicas, ROLES)
    if plot is not None:
        from wakeful.bench import plot as bench_plot

        bench_plot.require()
    result = bench_pipeline.run(
        settings, tasks, approval_ratio, rate, say, replicas=counts, plot=plot, tracing=tracing
    )
    emit(result, as_json, bench_pipeline.render(result))


@cli.command("chaos")
@app_option
@click.option("--tasks", default=200, show_default=True, help="Tasks to run.")
@click.option("--kills", default=10, show_default=True, help="Random worker kills (SIGKILL, then restart).")
@click.option("--seed", type=int, default=None, help="Seed for a repeatable run.")
@REPLICAS
@click.option(
    "--lose-redis",
    type=click.Choice(["wipe", "fresh"]),
    default=None,
    help="Instead of kills: lose Redis mid-workload (wipe: delete every wakeful key; fresh: move to a "
    "new, empty Redis), rebuild it with `wakeful recover`, and check nothing was lost or done twice.",
)
@click.option(
    "--outage",
    "outage",
    default=None,
    metavar="TARGETS",
    help="Instead of kills: take these down (roles, `all`, `redis`, `kafka`; comma-separated) while the "
    "tasks arrive through the HTTP door and straight to Kafka, bring them back, and report what was "
    "dead-lettered, lost, done twice or stranded (docs/crashes.md).",
)
@click.option(
    "--for", "outage_for", default="60s", show_default=True, help="With --outage: how long (30s, 5m, 1h)."
)
@click.option(
    "--door-port", default=18081, show_default=True, help="With --outage: the drill's HTTP door's port."
)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def chaos(
    settings: Settings,
    *,
    tasks: int,
    kills: int,
    seed: int | None,
    replicas: str | None,
    lose_redis: str | None,
    outage: str | None,
    outage_for: str,
    door_port: int,
    as_json: bool,
) -> None:
    """Run tasks while killing random workers, then check the invariants; exit 1 if one broke."""
    from wakeful.bench import chaos as chaos_run

    if outage is not None:
        from wakeful.bench import outage as drill_outage

        targets, seconds = drill_outage.targets_of([outage]), drill_outage.duration(outage_for)
        counts = _replicas(settings, replicas, ROLES)
        report = drill_outage.run(
            settings, tasks, targets, seconds, seed=seed, say=say, door_port=door_port, replicas=counts
        )
        emit(report, as_json, drill_outage.render(report))
        if not report["ok"]:
            sys.exit(1)
        return
    if lose_redis is not None:
        from wakeful.bench import drill

        report = drill.run(settings, tasks, lose_redis, seed, say)
        emit(report, as_json, drill.render(report))
        if not report["ok"]:
            sys.exit(1)
        return
    counts = _replicas(settings, replicas, ROLES)
    report = chaos_run.run(settings, tasks, kills, seed, say, replicas=counts)
    emit(report, as_json, chaos_run.render(report))
    if not report["ok"]:
        sys.exit(1)


@cli.command("bench-retention")
@click.option(
    "--closed", type=click.IntRange(2), default=100_000, show_default=True, help="Closed tasks to seed."
)
@click.option("--no-purge", is_flag=True, help="Seed and measure only; leave the tasks.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def bench_retention(settings: Settings, closed: int, no_purge: bool, as_json: bool) -> None:
    """What N closed tasks cost Redis (used_memory, at N/2 and N), and what a purge gives back."""
    from wakeful.bench import retention as bench

    result = bench.run(settings, closed, say, purge_too=not no_purge)
    emit(result, as_json, bench.render(result))


@cli.command("bench-recover")
@click.option(
    "--purged",
    type=click.IntRange(0),
    default=20_000,
    show_default=True,
    help="Tasks closed long ago and purged: history the log keeps and Redis does not.",
)
@click.option(
    "--closed",
    type=click.IntRange(0),
    default=4_000,
    show_default=True,
    help="Tasks closed lately (Redis keeps them).",
)
@click.option(
    "--open",
    "open_",
    type=click.IntRange(0),
    default=1_000,
    show_default=True,
    help="Tasks waiting for an approval.",
)
@click.option("--tenant", default=None, help="Add to (and lose) this tenant's tasks; default: a new one.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def bench_recover(  # noqa: PLR0917 -- click passes every option as a parameter
    settings: Settings, purged: int, closed: int, open_: int, tenant: str | None, as_json: bool
) -> None:
    """Add tasks to wakeful.log through a real relay, lose their keys, and print the peak RSS and
    time of `wakeful recover` over the whole log (a stack of its own: it restores every task)."""
    from wakeful.bench import recover as bench

    _need_stack(settings, kafka=True)
    counts = {"purged": purged, "closed": closed, "open": open_}
    result = bench.run(settings, counts, say, tenant=tenant)
    emit(result, as_json, bench.render(result))


@cli.command("bench-state")
@click.option("--seconds", default=5.0, show_default=True, help="Duration of each concurrency level.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def bench_state(settings: Settings, seconds: float, as_json: bool) -> None:
    """transition() throughput and p50/p99 at 1, 8 and 64 concurrent tasks, beside the raw CAS ceiling."""
    from wakeful.bench import state as bench

    _need_stack(settings, kafka=False)
    result = bench.run(settings, seconds, say)
    emit(result, as_json, bench.render(result))


@cli.command("worker")
@app_option
@click.argument("roles", nargs=-1, required=True, type=click.Choice([*ROLES, "all"]))
@click.option("--fault", "fault_points", default=None, help="Crash point(s) to arm, comma-separated.")
@click.option(
    "--allow-second", is_flag=True, help="Run every role even if a fleet already runs on this state dir."
)
@REPLICAS
@click.option(
    "--ingress-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Run the HTTP door (`wakeful ingress`) on this port too, supervised with the roles.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    envvar=METRICS_PORT_ENV,
    default=None,
    help="Serve Prometheus metrics on GET /metrics at this port; several processes take it and the "
    "ports after it, in role order (docs/metrics.md). Default: none.",
)
@click.option(
    "--metrics-host",
    envvar="WAKEFUL_METRICS_HOST",
    default="127.0.0.1",
    show_default=True,
    help="The address the metrics port is bound on.",
)
@click.pass_obj
def worker(  # noqa: PLR0917 -- click passes every option as a parameter
    settings: Settings,
    roles: tuple[str, ...],
    fault_points: str | None,
    allow_second: bool,
    replicas: str | None,
    ingress_port: int | None,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Run consumer roles until SIGTERM or Ctrl-C: one role in this process; several, or `all`, or
    any --replicas, as supervised processes (each restarted when it dies; all stopped when the
    supervisor stops, even by SIGKILL). One fleet of every role runs per state dir unless --allow-second."""
    import signal
    import threading

    from wakeful.consumers.kafka import supervisor
    from wakeful.core import faults, metrics

    wanted = ROLES if "all" in roles else tuple(dict.fromkeys(roles))
    several = len(wanted) > 1 or bool(replicas) or ingress_port is not None
    if metrics_port is not None and not several:  # bound before any wait: a taken port fails at once
        metrics.serve(metrics_port, metrics_host, wanted[0])
    _need_stack(settings)
    _need_functions(settings, wanted)
    _publish_tools(settings)
    points = fault_points or os.environ.get("WAKEFUL_FAULT")
    faults.arm(points)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    counts = _replicas(settings, replicas, wanted)
    if several:
        armed = [p for p in (points or "").split(",") if p]
        served = (metrics_host, metrics_port) if metrics_port is not None else None
        sys.exit(
            supervisor.supervise(
                wanted,
                armed,
                stop,
                settings.home,
                allow_second,
                replicas=counts,
                metrics=served,
                ingress_port=ingress_port,
            )
        )
    supervisor.stop_with_parent()
    sys.exit(_run_role(settings, wanted[0], stop))


def _run_role(settings: Settings, role: str, stop: Any) -> int:
    import importlib

    from wakeful.consumers.kafka import client as kafka_client
    from wakeful.core import tracing
    from wakeful.core.log import Log

    module = importlib.import_module(f"wakeful.consumers.{role}.main")
    # A refused login stops the role here in one line, not as clients retrying for ever.
    kafka_client.check_login(settings, role)
    try:
        with tracing.started(role):  # on only if an OTLP endpoint is set; the last export at the end
            module.main(settings, stop)
    except WakefulError:
        raise
    except Exception as exc:
        Log(role=role)("role.crashed", error=repr(exc))
        return 1
    return 0


@cli.command("demo")
@app_option
@click.pass_obj
def demo(settings: Settings) -> None:
    """The main job: start the stack and workers if needed, then tell the whole story; exit 1 if a
    step does not behave as told."""
    from wakeful.cli.demo import Demo

    runner = Demo(settings, say)
    if not runner.run():
        say(f"demo FAILED at: {', '.join(runner.failures)}")
        sys.exit(1)
    click.echo("demo ok: every step behaved as told")


def _clustered(settings: Settings, redis_cluster: bool) -> Settings:
    """The settings with the Redis Cluster flag given on the command line (it only adds)."""
    return dataclasses.replace(settings, redis_cluster=True) if redis_cluster else settings


def _need_stack(settings: Settings, *, kafka: bool = True, redis: bool = True) -> None:
    """A command that needs the running stack says in one line how to start it, before it does
    anything else (never a credentials error or a client time-out)."""
    from wakeful.operate import reach

    if redis:
        reach.require_redis(settings)
    if kafka:
        reach.require_kafka(settings)


def _need_functions(settings: Settings, roles: tuple[str, ...]) -> None:
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


def _publish_tools(settings: Settings) -> bool:
    """A worker started where the admin credential is (the local stack) publishes its app's tool
    catalog, as a deploy does (D57); roles never write authority, and a worker without the
    credential leaves it to `wakeful tools publish`. True if it changed what was published."""
    from wakeful.core import secrets
    from wakeful.operate.client import DEPLOYER, Client

    if not secrets.exists(settings, "admin", "redis"):
        return False
    client = Client(settings)
    try:
        changed = client.publish_tools(DEPLOYER)
        if changed:
            say(f"published app {client.app.name}'s tool catalog {client.app.catalog}")
            journal(settings)
        return changed
    finally:
        client.close()


def _status_table(servers: list[Any]) -> str:
    rows = [f"{'server':8} {'address':32} {'managed':9} {'pid':>8}  health"]
    for s in servers:
        pid = str(s.pid) if s.pid else "-"
        rows.append(f"{s.name:8} {s.address:32} {s.managed:9} {pid:>8}  {'ok' if s.healthy else 'DOWN'}")
    return "\n".join(rows)


cli.add_command(task)
task.add_command(task_release)
task.add_command(task_purge)
cli.add_command(ledger)
cli.add_command(release)
cli.add_command(authority)
authority.add_command(backup)
cli.add_command(recover)
cli.add_command(freeze)
cli.add_command(thaw)
cli.add_command(show_frozen)
signers.add_command(revoke_signer)
signers.add_command(unrevoke_signer)
cli.add_command(tools)
cli.add_command(memory)
cli.add_command(new_agent)
cli.add_command(ingress)
cli.add_command(bench_ingress)
dev.add_command(model_server)
cli.add_command(dlq)
cli.add_command(ops)


def main() -> None:
    try:
        cli(standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except WakefulError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except RedisConnectionError as exc:  # the server went away mid-command
        click.echo(f"error: lost Redis ({exc}); `wakeful dev status` shows what is running", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
