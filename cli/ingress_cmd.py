"""`wakeful ingress`: the HTTP door upstream systems read their receipts and tasks from."""

from __future__ import annotations

from urllib.parse import urlsplit

import click

from wakeful.cli.output import say
from wakeful.core.settings import Settings


@click.command("ingress")
@click.option("--host", default=None, help="Address to listen on (default: WAKEFUL_INGRESS_URL's host).")
@click.option(
    "--port", default=None, type=int, help="Port to listen on (default: WAKEFUL_INGRESS_URL's port)."
)
@click.pass_obj
def ingress(settings: Settings, host: str | None, port: int | None) -> None:
    """Serve signed reads (receipts, a tenant's tasks by stage or wait) until Ctrl-C or SIGTERM."""
    from wakeful.consumers import ingress as door
    from wakeful.devstack import stack

    stack.require_redis(settings)
    url = urlsplit(settings.ingress_url)
    host = host or url.hostname or "127.0.0.1"
    port = port if port is not None else url.port or (443 if url.scheme == "https" else 80)
    say(f"ingress on http://{host}:{port} (GET /v1/health, /v1/receipts/E, /v1/tasks/T, /v1/tasks?stage=S)")
    door.main(settings, host, port)
