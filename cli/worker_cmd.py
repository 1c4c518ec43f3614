"""`wakeful worker`: run consumer roles, one in this process or several supervised."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from wakeful.cli.app_option import app_option
from wakeful.cli.preflight import REPLICAS, need_functions, need_stack, publish_tools, replicas_of
from wakeful.consumers.kafka.supervisor import METRICS_PORT_ENV, ROLES
from wakeful.core.errors import WakefulError
from wakeful.core.settings import Settings


@click.command("worker")
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
    need_stack(settings)
    need_functions(settings, wanted)
    if not supervisor.spawned():  # a supervisor or a fleet published before it started this role
        publish_tools(settings)
    points = fault_points or os.environ.get("WAKEFUL_FAULT")
    faults.arm(points)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    counts = replicas_of(settings, replicas, wanted)
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
