"""`wakeful tools ...`: an app's tools as authority data (D57). The catalog is published on deploy;
a tool is turned off and on live, each change recorded with who, when and why; every executor reads
the switches at each step it begins, before the step's intent is written."""

from __future__ import annotations

from typing import Any

import click

from wakeful.authority.switches import field_of
from wakeful.cli.app_option import app_option
from wakeful.cli.output import emit, say
from wakeful.core.errors import ConfigError
from wakeful.core.settings import Settings
from wakeful.operate.client import DEPLOYER, Client
from wakeful.operate.release import OPERATOR_KIND, operators
from wakeful.sdk.tools import published

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
by_option = click.option(
    "--by", required=True, help="The operator who changes it (a signer that may send task.reopen): recorded."
)


@click.group()
def tools() -> None:
    """The app's tools in the authority store: publish the catalog, list, disable, enable, history."""


@tools.command("publish")
@app_option
@click.option("--by", default=DEPLOYER, show_default=True, help="Who deploys it: recorded.")
@click.pass_obj
def tools_publish(settings: Settings, by: str) -> None:
    """Publish the app's tool catalog (each tool's name, contract and wording hashes, stages,
    reversibility). `authority init`, the demo and `worker` with the admin credential do it too."""
    client = Client(settings)
    changed = client.publish_tools(by)
    app = client.app
    say(f"app {app.name}: tool catalog {app.catalog} {'published' if changed else 'was published already'}")


@tools.command("list")
@app_option
@json_option
@click.pass_obj
def tools_list(settings: Settings, as_json: bool) -> None:
    """Each tool of the app, on or off (who turned it off, when and why), as the executors read it."""
    client = Client(settings)
    app, doc = client.app, client.tools.catalog(client.app.name)
    entries = {t["name"]: t for t in (doc or {}).get("tools", ())}
    entries |= {t["name"]: t for t in published(app.tools) if t["name"] not in entries}
    switches = client.tools.switches()
    rows = []
    for name, entry in sorted(entries.items()):
        switch = switches.get(field_of(app.name, name))
        rows.append({**entry, "enabled": switch is None, "switch": switch.as_dict() if switch else None})
    shown = {
        "app": app.name,
        "published": doc.get("catalog") if doc else None,
        "published_at": doc.get("published_at") if doc else None,
        "deployed": app.catalog,
        "tools": rows,
    }
    emit(shown, as_json, "\n".join(_lines(shown)))


@tools.command("disable")
@app_option
@click.argument("name")
@click.option("--reason", required=True, help="Why: recorded, and shown to whoever meets the switch.")
@by_option
@click.pass_obj
def tools_disable(settings: Settings, name: str, reason: str, by: str) -> None:
    """Turn tool NAME off: from now on every executor refuses a step of it before the step's intent
    is written and parks its task in needs_review, naming the switch. A step already begun completes."""
    client = Client(settings)
    app = client.app.name
    _operator(client, by)
    switch = client.tools.disable(app, name, by=by, reason=reason, known=client.tool_names())
    if switch is None:
        had = client.tools.switch(app, name)
        assert had is not None  # it was off when disable() read it
        say(f"tool {name} of app {app} was disabled already (by {had.by} at {had.at}: {had.reason})")
        return
    say(f"tool {name} of app {app} is disabled; executors refuse it from their next step")


@tools.command("enable")
@app_option
@click.argument("name")
@by_option
@click.option("--reason", default="", help="Why: recorded.")
@click.pass_obj
def tools_enable(settings: Settings, name: str, by: str, reason: str) -> None:
    """Turn tool NAME on again. Tasks it parked stay in needs_review: `wakeful task reopen` each."""
    client = Client(settings)
    app = client.app.name
    _operator(client, by)
    had = client.tools.enable(app, name, by=by, reason=reason, known=client.tool_names())
    if had is None:
        say(f"tool {name} of app {app} was enabled already")
        return
    say(f"tool {name} of app {app} is enabled (it was disabled by {had.by} at {had.at}: {had.reason})")


@tools.command("history")
@app_option
@click.option("--tool", "tool", default=None, help="Only this tool's changes.")
@click.option(
    "--limit", default=50, show_default=True, type=click.IntRange(min=1), help="The last N changes."
)
@json_option
@click.pass_obj
def tools_history(settings: Settings, tool: str | None, limit: int, as_json: bool) -> None:
    """Every publish, disable and enable of the app's tools, oldest first, with who, when and why."""
    client = Client(settings)
    rows = client.tools.history(client.app.name, tool, limit)
    human = "\n".join(f"{r['at']}  {r['action']:8} {r['tool']:16} by {r['by']}: {r['reason']}" for r in rows)
    emit(rows, as_json, human or f"no changes to app {client.app.name}'s tools")


def _operator(client: Client, by: str) -> None:
    """ConfigError unless `by` is an operator: as for `task release`, a principal with a signer key
    that may send task.reopen. A switch stops a tool for every tenant, so any tenant's will do."""
    known = operators(client.authority.snapshot(with_signers=True))
    if by not in known:
        raise ConfigError(
            "--by",
            f"{by!r} is not an operator: no signer key of {by!r} may send {OPERATOR_KIND} "
            f"(operators: {', '.join(sorted(known)) or 'none'})",
        )


def _lines(shown: dict[str, Any]) -> list[str]:
    published_as = shown["published"] or "not published (wakeful tools publish)"
    lines = [f"app {shown['app']}: catalog {published_as}"]
    if shown["published"] and shown["published"] != shown["deployed"]:
        lines.append(f"  this checkout's app is {shown['deployed']}: `wakeful tools publish` to publish it")
    for row in shown["tools"]:
        state = "enabled " if row["enabled"] else "DISABLED"
        stages, kind = ",".join(row["stages"]), "reversible" if row["reversible"] else "irreversible"
        lines.append(
            f"{row['name']:16} {state} stages {stages}  {kind}  "
            f"contract {row['contract']} wording {row['wording']}"
        )
        if row["switch"]:
            s = row["switch"]
            lines.append(f"  disabled by {s['by']} at {s['at']}: {s['reason']}")
    return lines
