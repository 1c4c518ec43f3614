"""The executor's egress guard, set up before any tool connects (D116): what each of the app's tools
may reach (core/egress.py), from WAKEFUL_EGRESS and, for a downstream that keeps its records in the
stack's own Redis (state/downstreams.py), that Redis; then each tool's connect, confined to it.

After a call, `receipt` turns what the guard refused into the step's failure: logged, counted, and
the reason the task is parked with, naming what the tool tried."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from wakeful.consumers.executor import credentials
from wakeful.core import egress, egress_guard, metrics
from wakeful.core.egress import Endpoint
from wakeful.core.egress_guard import Confinement
from wakeful.core.egress_proxy import Proxy
from wakeful.core.log import Log
from wakeful.core.minting import Credential
from wakeful.core.settings import Settings
from wakeful.sdk.app import App
from wakeful.sdk.tools import Tool, ToolFenced, ToolRefused, ToolUnavailable
from wakeful.state import acl, downstreams

_LOG = Log(role="executor")
T = TypeVar("T")


@dataclass(frozen=True)
class EgressRefusal:
    """A tool run the egress guard refused something in (D116): why its step fails for good."""

    reason: str


def table(settings: Settings) -> dict[str, tuple[Endpoint, ...]]:
    """Each egress name's endpoints: the stack's Redis for each downstream user, then WAKEFUL_EGRESS."""
    url = urlsplit(settings.redis_url)
    host, port = url.hostname or "127.0.0.1", url.port or 6379
    local_cluster = settings.redis_cluster and settings.runs_local_redis
    ports = {port, *(settings.redis_cluster_ports if local_cluster else ())}
    redis = tuple(Endpoint(host, p, p) for p in sorted(ports))
    found = {d.user: redis for d in acl.downstreams_of(settings)}
    # a Kafka downstream is reached through the cluster's brokers: the bootstrap's, as advertised (D123)
    brokers = tuple(e for a in settings.kafka_bootstrap.split(",") if (e := egress.endpoint(a.strip())))
    found |= {d.name: brokers for d in downstreams.kafka(settings.downstreams)}
    for name, endpoints in egress.parse_map(settings.egress).items():
        found[name] = found.get(name, ()) + endpoints
    return found


def connect_tools(settings: Settings, app: App, log: Log) -> None:
    """Install the guard with the app's tools' egress, then open each tool, confined to its own."""
    mapped = table(settings)
    allowed = {tool.name: egress.resolve(tool.name, tool.egress, mapped) for tool in app.tools}
    report = settings.egress_mode == "report"
    egress_guard.install(app.name, allowed, proxy=Proxy().start(), report=report)
    if report:
        log("executor.egress_report_only", fix=f"set {egress.MODE_ENV}=enforce once nothing is reported")
    for tool in app.tools:
        if lost := egress.unmapped(tool.egress, mapped):
            log("executor.egress_unmapped", tool=tool.name, names=lost, fix=f"map them in {egress.ENV}")
        with egress_guard.confined(tool.name):
            tool.connect(settings)  # each with its own credentials, and only its own egress
    credentials.start(settings, app, log)  # the minter of the tools that declare a credential (D120)


def receipt(run: Confinement | None, task_id: str) -> str | None:
    """Why the step failed for good, if the guard refused anything its tool tried (None if not;
    and None when it only reports, with what was tried logged and counted all the same)."""
    if run is None or not run.refused:
        return None
    metrics.egress_refused(run.app, run.allowed.tool)
    event = "executor.egress_outside" if run.report else "executor.egress_refused"
    _LOG(event, task_id=task_id, tool=run.allowed.tool, tried=run.refused[:8])
    return None if run.report else run.allowed.refusal(", ".join(dict.fromkeys(run.refused[:4])))


def held(
    tool: Tool[Any], task_id: str, run_tool: Callable[[], T], step: tuple[str, int] | None = None
) -> T | EgressRefusal:
    """`run_tool()` held to `tool`'s egress: what it returned, or EgressRefusal when the guard refused
    anything it tried, whatever the tool made of it (an error it raised then is that refusal's). An
    error of the tool's own is raised, as is any while the guard only reports.

    `step`: the (op key, fence) of the run, for which a tool that declares a credential is minted
    one (consumers/executor/credentials.py); a result that carries it fails the step, and an error
    that names it is raised with it blotted out."""
    op_key, fence = step if step is not None else (None, 0)
    with credentials.minted(tool, task_id, op_key, fence) as secret:
        with egress_guard.confined(tool.name) as run:
            try:
                made = run_tool()
            except Exception as exc:
                if run is None or not run.refused or run.report:
                    receipt(run, task_id)  # reporting: what it tried is still noted
                    if secret is not None and _carries(str(exc), secret):
                        raise _blotted(exc, secret) from None
                    raise
        if secret is not None and _carries(repr(made), secret):
            return EgressRefusal(f"{tool.name} returned its step's credential: the result is not recorded")
    said = receipt(run, task_id)
    return EgressRefusal(said) if said is not None else made


def _carries(text: str, secret: Credential | None) -> bool:
    return secret is not None and secret.password in text


def _blotted(exc: Exception, secret: Credential) -> Exception:
    """`exc` with the step's credential blotted out of its message (the tool errors the executor
    reads keep their kind; any other becomes a RuntimeError)."""
    said = str(exc).replace(secret.password, "[credential]")
    kind = type(exc) if isinstance(exc, ToolUnavailable | ToolRefused | ToolFenced) else RuntimeError
    return kind(said)
