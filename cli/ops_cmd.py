"""`wakeful ops`: the ops web page (devstack/ops_app.py, D76), served until Ctrl-C or SIGTERM."""

from __future__ import annotations

import click

from wakeful.cli.app_option import app_option
from wakeful.cli.output import say
from wakeful.cli.recover_cmd import journal
from wakeful.core.settings import Settings


@click.command("ops")
@app_option
@click.option(
    "--port", type=click.IntRange(1, 65535), default=8470, show_default=True, help="Port to listen on."
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on. Keep the default and put a TLS proxy in front to reach it from elsewhere.",
)
@click.option(
    "--secure-cookie",
    is_flag=True,
    help="Mark the session cookie Secure: the browser sends it over HTTPS only (behind a TLS proxy).",
)
@click.option(
    "--new-password",
    is_flag=True,
    help="Make a new page password and session key first: every session ends.",
)
@click.pass_obj
def ops(settings: Settings, port: int, host: str, secure_cookie: bool, new_password: bool) -> None:
    """Serve the ops web page: tasks by stage, waits, stuck, quarantined and review tasks, dead
    letters, retries and approval latency, charts, and the kill path, behind a login. The password is
    in $WAKEFUL_SECRETS/admin/ops.json (made on first use); log in as an operator's name."""
    import uvicorn

    from wakeful.devstack import ops_app, ops_auth, stack
    from wakeful.devstack.client import Client

    stack.require_redis(settings)
    login = ops_auth.ensure_login(settings, rotate=new_password)
    app = ops_app.build(Client(settings), login, on_change=lambda: journal(settings), secure=secure_cookie)
    say(f"ops page on http://{host}:{port}/ ; its password is in {ops_auth.login_path(settings)}")
    if host not in ("127.0.0.1", "localhost", "::1") and not secure_cookie:
        say("warning: listening beyond this machine without --secure-cookie: put a TLS proxy in front")
    uvicorn.run(app, host=host, port=port, log_level="warning", proxy_headers=True, server_header=False)
