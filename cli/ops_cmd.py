"""`wakeful ops`: the ops web page (operate/ops/app.py, D76), served until Ctrl-C or SIGTERM."""

from __future__ import annotations

import click

from wakeful.cli.app_option import app_option
from wakeful.cli.output import say
from wakeful.cli.recover_cmd import journal
from wakeful.core.settings import Settings
from wakeful.state import keys


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
@click.option(
    "--session-idle",
    type=click.IntRange(1),
    default=keys.OPS_SESSION_IDLE_S,
    show_default=True,
    envvar="WAKEFUL_OPS_SESSION_IDLE",
    help="Seconds a session lasts unused (WAKEFUL_OPS_SESSION_IDLE); every page renews it.",
)
@click.option(
    "--session-max",
    type=click.IntRange(1),
    default=keys.OPS_SESSION_MAX_S,
    show_default=True,
    envvar="WAKEFUL_OPS_SESSION_MAX",
    help="Seconds a session lasts at most, used or not (WAKEFUL_OPS_SESSION_MAX).",
)
@click.option(
    "--trusted-proxy",
    default="",
    envvar="WAKEFUL_OPS_TRUSTED_PROXIES",
    help="Comma-separated addresses or CIDR blocks of the proxies whose X-Forwarded-For is believed "
    "(WAKEFUL_OPS_TRUSTED_PROXIES). Default: none; every other request counts as its peer's address.",
)
@click.pass_obj
def ops(  # noqa: PLR0917 -- click passes every option as a parameter
    settings: Settings,
    port: int,
    host: str,
    secure_cookie: bool,
    new_password: bool,
    session_idle: int,
    session_max: int,
    trusted_proxy: str,
) -> None:
    """Serve the ops web page: tasks by stage, waits, stuck, quarantined and review tasks, dead
    letters, retries and approval latency, charts, and the kill path, behind a login. The password is
    in $WAKEFUL_SECRETS/admin/ops.json (made on first use); log in as an operator's name."""
    import uvicorn

    from wakeful.operate import reach
    from wakeful.operate.client import Client
    from wakeful.operate.ops import app as ops_app
    from wakeful.operate.ops import auth as ops_auth
    from wakeful.operate.ops.sessions import Limits

    try:
        proxies = ops_auth.trusted_proxies(trusted_proxy)
    except ValueError as exc:
        raise click.BadParameter(
            str(exc), param_hint="--trusted-proxy (WAKEFUL_OPS_TRUSTED_PROXIES)"
        ) from None
    reach.require_redis(settings)
    login = ops_auth.ensure_login(settings, rotate=new_password)
    app = ops_app.build(
        Client(settings),
        login,
        on_change=lambda: journal(settings),
        secure=secure_cookie,
        limits=Limits(idle_s=min(session_idle, session_max), max_s=session_max),
        proxies=proxies,
    )
    say(f"ops page on http://{host}:{port}/ ; its password is in {ops_auth.login_path(settings)}")
    if host not in ("127.0.0.1", "localhost", "::1") and not secure_cookie:
        say("warning: listening beyond this machine without --secure-cookie: put a TLS proxy in front")
    # uvicorn's own proxy headers are off: it believes 127.0.0.1 by default, so any local process
    # could name its address; the page reads X-Forwarded-For itself, from --trusted-proxy only.
    uvicorn.run(app, host=host, port=port, log_level="warning", proxy_headers=False, server_header=False)
