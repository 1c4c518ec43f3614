"""The whole-pipeline benches and drills: `wakeful bench`, `chaos`, `bench-retention`,
`bench-recover` and `bench-state` (the door's own is `bench-ingress`, in ingress_cmd.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from wakeful.cli.app_option import app_option
from wakeful.cli.output import emit, say
from wakeful.cli.preflight import REPLICAS, need_stack, replicas_of
from wakeful.consumers.kafka.supervisor import ROLES
from wakeful.core.settings import Settings


@click.command("bench")
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
    counts = replicas_of(settings, replicas, ROLES)
    if plot is not None:
        from wakeful.bench import plot as bench_plot

        bench_plot.require()
    result = bench_pipeline.run(
        settings, tasks, approval_ratio, rate, say, replicas=counts, plot=plot, tracing=tracing
    )
    emit(result, as_json, bench_pipeline.render(result))


@click.command("chaos")
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
        counts = replicas_of(settings, replicas, ROLES)
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
    counts = replicas_of(settings, replicas, ROLES)
    report = chaos_run.run(settings, tasks, kills, seed, say, replicas=counts)
    emit(report, as_json, chaos_run.render(report))
    if not report["ok"]:
        sys.exit(1)


@click.command("bench-retention")
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


@click.command("bench-recover")
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
def bench_recover(
    settings: Settings, purged: int, closed: int, open_: int, tenant: str | None, as_json: bool
) -> None:
    """Add tasks to wakeful.log through a real relay, lose their keys, and print the peak RSS and
    time of `wakeful recover` over the whole log (a stack of its own: it restores every task)."""
    from wakeful.bench import recover as bench

    need_stack(settings, kafka=True)
    counts = {"purged": purged, "closed": closed, "open": open_}
    result = bench.run(settings, counts, say, tenant=tenant)
    emit(result, as_json, bench.render(result))


@click.command("bench-state")
@click.option("--seconds", default=5.0, show_default=True, help="Duration of each concurrency level.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def bench_state(settings: Settings, seconds: float, as_json: bool) -> None:
    """transition() throughput and p50/p99 at 1, 8 and 64 concurrent tasks, beside the raw CAS ceiling."""
    from wakeful.bench import state as bench

    need_stack(settings, kafka=False)
    result = bench.run(settings, seconds, say)
    emit(result, as_json, bench.render(result))


@click.command("bench-fair")
@app_option
@click.option("--flood", type=click.IntRange(1), default=50_000, show_default=True, help="Flooding creates.")
@click.option(
    "--steady", type=click.IntRange(1), default=50, show_default=True, help="Creates of the other tenant."
)
@click.option(
    "--limit",
    type=click.IntRange(0),
    default=100,
    show_default=True,
    help="The flooding tenant's in-flight limit; 0 for none, to compare.",
)
@click.option("--rate", type=float, default=None, help="The flood's creates per second (default: flat out).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def bench_fair(
    settings: Settings, flood: int, steady: int, limit: int, rate: float | None, as_json: bool
) -> None:
    """One tenant's flood and another tenant's few creates at once: each tenant's wake-to-effect
    p50/p95/p99, with the flood held to an in-flight limit (or none), and what held creates cost."""
    from wakeful.bench import fair as bench

    result = bench.run(settings, flood, steady, limit=limit or None, rate=rate, say=say)
    emit(result, as_json, bench.render(result))
