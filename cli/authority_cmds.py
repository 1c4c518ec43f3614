"""`wakeful authority ...`: the operator's writes to the authority store, read live by the roles."""

from __future__ import annotations

import click

from wakeful.cli.app_option import app_option
from wakeful.cli.output import emit, say
from wakeful.core.ids import DEFAULT_TENANT
from wakeful.core.settings import Settings
from wakeful.devstack.client import Client
from wakeful.schemas import events


@click.group()
def authority() -> None:
    """Approvers, the approval limit, signer keys and policy versions."""


@authority.command("show")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def show(settings: Settings, as_json: bool) -> None:
    """Everything the roles will read at their next wake."""
    doc = Client(settings).authority.describe()
    emit(doc, as_json, "\n".join(f"{k}: {v}" for k, v in doc.items()))


@authority.command("init")
@app_option
@click.pass_obj
def init(settings: Settings) -> None:
    """Local defaults (idempotent): limit 1000, approvers alice and bob, and a dev signer key for every
    principal the app needs (each `principal:<name>` its workflows accept events from, too)."""
    wrote = Client(settings).init_authority()
    say("authority initialised" if wrote else "authority already initialised")


@authority.group()
def approvers() -> None:
    """Who may approve refunds above the limit."""


@approvers.command("add")
@click.argument("principal")
@click.pass_obj
def approvers_add(settings: Settings, principal: str) -> None:
    Client(settings).authority.add_approver(principal)
    say(f"{principal} may approve refunds")


@approvers.command("remove")
@click.argument("principal")
@click.pass_obj
def approvers_remove(settings: Settings, principal: str) -> None:
    removed = Client(settings).authority.remove_approver(principal)
    say(f"{principal} may no longer approve refunds" if removed else f"{principal} was not an approver")


@approvers.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def approvers_list(settings: Settings, as_json: bool) -> None:
    names = sorted(Client(settings).authority.snapshot().approvers)
    emit(names, as_json, "\n".join(names) or "no approvers")


@authority.group()
def limit() -> None:
    """The amount above which a refund needs an approval."""


@limit.command("set")
@click.argument("amount", type=click.IntRange(min=0))
@click.pass_obj
def limit_set(settings: Settings, amount: int) -> None:
    Client(settings).authority.set_limit(amount)
    say(f"refunds above {amount} need an approval")


@authority.group()
def signers() -> None:
    """Keys that may sign events, and for which event kinds."""


@signers.command("add")
@app_option
@click.argument("principal")
@click.option(
    "--kinds", default=events.APPROVE, show_default=True, help="Comma-separated event kinds the app knows."
)
@click.option("--tenant", default=DEFAULT_TENANT, show_default=True, help="The tenant it signs for.")
@click.pass_obj
def signers_add(settings: Settings, principal: str, kinds: str, tenant: str) -> None:
    """Create (or reuse) PRINCIPAL's Ed25519 key in the local keystore and register its public half."""
    wanted = tuple(k.strip() for k in kinds.split(",") if k.strip())
    if not wanted:
        raise click.BadParameter("name at least one event kind", param_hint="'--kinds'")
    key_id = Client(settings).add_signer(principal, wanted, tenant)
    say(f"{principal} signs with {key_id} for tenant {tenant} ({', '.join(wanted)})")


@signers.command("remove")
@click.argument("principal")
@click.pass_obj
def signers_remove(settings: Settings, principal: str) -> None:
    removed = Client(settings).authority.remove_signer(f"key-{principal}")
    say(f"key-{principal} removed" if removed else f"key-{principal} was not registered")


@authority.group()
def policy() -> None:
    """The deployed policy version, and the compatibility rule (gate 4) for a task whose policy or
    tool catalog differs from what is deployed."""


@policy.command("set")
@app_option
@click.option("--policy", "policy_version", default=None, help="Deployed policy version.")
@click.option(
    "--tool-catalog",
    default=None,
    help="A label `authority show` prints; nothing else reads it. Gate 4 compares a task's catalog "
    "with the loaded app's, a digest of its tools.",
)
@click.option(
    "--compat",
    multiple=True,
    metavar="NAME=RULE",
    help="NAME=pin|migrate|quarantine, NAME policy or tool_catalog, e.g. policy=migrate. Without "
    "--this-app: for every app that declares no rule of its own (App.compat).",
)
@click.option(
    "--this-app",
    is_flag=True,
    help="The --compat rules are for the app --app names (or the default app) alone, and outrank "
    "the rules it declares.",
)
@click.pass_obj
def policy_set(
    settings: Settings,
    policy_version: str | None,
    tool_catalog: str | None,
    compat: tuple[str, ...],
    this_app: bool,
) -> None:
    """Set the deployed policy label and gate 4's compatibility rules, read at the roles' next wake."""
    malformed = [item for item in compat if "=" not in item]
    if malformed:
        raise click.BadParameter(
            f"{', '.join(malformed)}: write NAME=RULE, e.g. policy=migrate", param_hint="--compat"
        )
    rules = dict(item.split("=", 1) for item in compat)
    client = Client(settings)
    app = client.app.name if this_app else None
    client.authority.set_policy(policy_version, tool_catalog, rules, app=app)
    say(f"policy updated{f' for app {app}' if app else ''}; roles read it at their next wake")
