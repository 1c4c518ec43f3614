"""`wakeful ingress`: the HTTP door upstream systems post events and webhooks to, and read from."""

from __future__ import annotations

from urllib.parse import urlsplit

import click

from wakeful.cli.app_option import app_option
from wakeful.cli.output import say
from wakeful.core.settings import Settings


@click.command("ingress")
@app_option
@click.option("--host", default=None, help="Address to listen on (default: WAKEFUL_INGRESS_URL's host).")
@click.option(
    "--port", default=None, type=int, help="Port to listen on (default: WAKEFUL_INGRESS_URL's port)."
)
@click.option(
    "--rate",
    default=200.0,
    show_default=True,
    type=click.FloatRange(min=0.001),
    envvar="WAKEFUL_INGRESS_RATE",
    help="Posts per second one key may send (WAKEFUL_INGRESS_RATE); past it: 429 and Retry-After.",
)
@click.option(
    "--burst",
    default=400,
    show_default=True,
    type=click.IntRange(min=1),
    envvar="WAKEFUL_INGRESS_BURST",
    help="Posts one key may send at once before --rate holds it back (WAKEFUL_INGRESS_BURST).",
)
@click.option(
    "--tenant-rate",
    default=None,
    type=click.FloatRange(min=0.001),
    envvar="WAKEFUL_INGRESS_TENANT_RATE",
    help="Posts per second all of one tenant's keys may send together (WAKEFUL_INGRESS_TENANT_RATE); "
    "default: no such bound, each key held by --rate alone.",
)
@click.option(
    "--tenant-burst",
    default=None,
    type=click.IntRange(min=1),
    envvar="WAKEFUL_INGRESS_TENANT_BURST",
    help="Posts a tenant's keys may send at once before --tenant-rate holds them back "
    "(WAKEFUL_INGRESS_TENANT_BURST; default: two seconds' worth).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    envvar="WAKEFUL_INGRESS_METRICS_PORT",
    default=None,
    help="Serve the door's Prometheus metrics on GET /metrics at this port, apart from the door "
    "(WAKEFUL_INGRESS_METRICS_PORT; docs/metrics.md). Default: none. The door's own port never "
    "serves them.",
)
@click.option(
    "--metrics-host",
    envvar="WAKEFUL_INGRESS_METRICS_HOST",
    default="127.0.0.1",
    show_default=True,
    help="The address the metrics port is bound on (WAKEFUL_INGRESS_METRICS_HOST).",
)
@click.pass_obj
def ingress(  # noqa: PLR0917 -- click passes every option as a parameter
    settings: Settings,
    host: str | None,
    port: int | None,
    rate: float,
    burst: int,
    tenant_rate: float | None,
    tenant_burst: int | None,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Take signed events and webhooks (POST /v1/events, /v1/webhooks) and serve signed reads
    (receipts, a tenant's tasks by stage or wait) until Ctrl-C or SIGTERM; its metrics only on
    --metrics-port."""
    from wakeful.consumers.ingress import main as door
    from wakeful.consumers.ingress.limits import Limit
    from wakeful.consumers.kafka import client as kafka_client
    from wakeful.operate import reach

    reach.require_redis(settings)
    reach.require_kafka(settings)
    kafka_client.check_login(settings, "ingress")
    url = urlsplit(settings.ingress_url)
    host = host or url.hostname or "127.0.0.1"
    port = port if port is not None else url.port or (443 if url.scheme == "https" else 80)
    say(
        f"ingress on http://{host}:{port} (POST /v1/events, /v1/webhooks; GET /v1/health, "
        "/v1/receipts/E, /v1/tasks/T, /v1/tasks?stage=S)"
    )
    scrape = (metrics_host, metrics_port) if metrics_port is not None else None
    if scrape is not None:
        say(f"its metrics on http://{metrics_host}:{metrics_port}/metrics (never on the door's port)")
    if tenant_burst is not None and tenant_rate is None:
        raise click.UsageError("--tenant-burst goes with --tenant-rate")
    per_tenant = None
    if tenant_rate is not None:
        per_tenant = Limit(rate=tenant_rate, burst=tenant_burst or max(1, int(2 * tenant_rate)))
        say(
            f"each tenant's keys together: at most {tenant_rate:g} posts a second, {per_tenant.burst} at once"
        )
    door.main(settings, host, port, Limit(rate=rate, burst=burst), scrape, per_tenant=per_tenant)


@click.command("bench-ingress")
@app_option
@click.option("--tasks", default=1000, show_default=True, help="Tasks to send by each path.")
@click.option("--approval-ratio", default=0.3, show_default=True, help="Share of tasks on the second path.")
@click.option(
    "--concurrency", default=32, show_default=True, type=click.IntRange(1, 512), help="Senders at once."
)
@click.option("--port", default=18090, show_default=True, type=int, help="Port of the door the bench starts.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def bench_ingress(  # noqa: PLR0917  # click passes every option as a parameter
    settings: Settings, tasks: int, approval_ratio: float, concurrency: int, port: int, as_json: bool
) -> None:
    """N tasks posted over HTTP to `wakeful ingress`, the pipeline behind it, beside N published
    straight to Kafka: requests/s, answer p50/p99, the door's CPU per request, tasks/s."""
    from wakeful.bench import ingress as bench
    from wakeful.cli.output import emit

    result = bench.run(settings, tasks, approval_ratio, concurrency=concurrency, port=port, say=say)
    emit(result, as_json, bench.render(result))
