"""`wakeful authority ...`: the operator's writes to the authority store, read live by the roles."""

from __future__ import annotations

import click

from wakeful.authority import signer_reseal, signer_seal
from wakeful.cli import owner_gate, policy_cmds
from wakeful.cli.app_option import app_option, checked_app
from wakeful.cli.output import emit, say
from wakeful.cli.policy_cmds import app_name, app_name_option
from wakeful.core.ids import DEFAULT_TENANT
from wakeful.core.settings import Settings
from wakeful.operate.client import Client
from wakeful.schemas import events
from wakeful.workflow.changes import APPROVAL_LIMIT, Change


@click.group()
def authority() -> None:
    """Approvers, the approval limit, signer keys, policy versions and the tenants' in-flight limits."""


@authority.command("show")
@app_name_option
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def show(settings: Settings, app: str | None, as_json: bool) -> None:
    """Everything the roles of the app will read at their next wake."""
    doc = Client(settings).authority.describe(app_name(settings, app))
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
    """An app's approvers: its policy's Group::"approvers"."""


@approvers.command("add")
@click.argument("principal")
@app_name_option
@click.pass_obj
def approvers_add(settings: Settings, principal: str, app: str | None) -> None:
    name = app_name(settings, app)
    Client(settings).authority.add_approver(principal, name)
    say(f"{principal} is an approver of app {name}")


@approvers.command("remove")
@click.argument("principal")
@app_name_option
@click.pass_obj
def approvers_remove(settings: Settings, principal: str, app: str | None) -> None:
    name = app_name(settings, app)
    removed = Client(settings).authority.remove_approver(principal, name)
    say(
        f"{principal} is no longer an approver of app {name}"
        if removed
        else f"{principal} was not an approver of app {name}"
    )


@approvers.command("list")
@app_name_option
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def approvers_list(settings: Settings, app: str | None, as_json: bool) -> None:
    names = sorted(Client(settings).authority.snapshot(app=app_name(settings, app)).approvers)
    emit(names, as_json, "\n".join(names) or "no approvers")


@authority.group()
def limit() -> None:
    """Approval amount: an app's resource.app.limit.

    An amount above which a task waits for an approver, read by the app's policy. Not `authority
    limits`, which says how many of a tenant's tasks may be in flight at once."""


@limit.command("set")
@click.argument("amount", type=click.IntRange(min=0))
@app_name_option
@click.pass_obj
def limit_set(settings: Settings, amount: int, app: str | None) -> None:
    """Set AMOUNT; for an app that declares owners, once they signed this change (D124)."""
    name, client = app_name(settings, app), Client(settings)
    was = client.authority.snapshot(app=name).limit
    loaded = checked_app(app) if app and ":" in app else None
    owner_gate.require(
        settings, client, Change(name, APPROVAL_LIMIT, {"amount": amount, "from": was}), loaded
    )
    client.authority.set_limit(amount, name)
    say(f"app {name}'s approval limit is {amount} (was {was})")


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
@click.option(
    "--alg",
    type=click.Choice(["ed25519", "hmac-sha256"]),
    default="ed25519",
    show_default=True,
    help="hmac-sha256: a shared secret, for a system that sends webhooks (docs/ingress.md).",
)
@click.pass_obj
def signers_add(settings: Settings, principal: str, kinds: str, tenant: str, alg: str) -> None:
    """Create (or reuse) PRINCIPAL's Ed25519 key in the local keystore and register its public half;
    with --alg hmac-sha256, its webhook secret, registered as key hmac-PRINCIPAL."""
    wanted = tuple(k.strip() for k in kinds.split(",") if k.strip())
    if not wanted:
        raise click.BadParameter("name at least one event kind", param_hint="'--kinds'")
    if alg == "hmac-sha256":
        key_id, path = Client(settings).add_hmac_signer(principal, wanted, tenant)
        say(f"{principal} signs webhooks with {key_id} for tenant {tenant} ({', '.join(wanted)})")
        say(f"its secret (hex) is in {path}: give it to {principal} over a safe channel")
        return
    key_id = Client(settings).add_signer(principal, wanted, tenant)
    say(f"{principal} signs with {key_id} for tenant {tenant} ({', '.join(wanted)})")


@signers.command("remove")
@click.argument("principal")
@click.pass_obj
def signers_remove(settings: Settings, principal: str) -> None:
    removed = Client(settings).authority.remove_signer(f"key-{principal}")
    say(f"key-{principal} removed" if removed else f"key-{principal} was not registered")


@signers.command("seal")
@click.pass_obj
def signers_seal(settings: Settings) -> None:
    """Seal every HMAC signer secret the registry holds whole (written by a release before this one)
    or under a retired seal key, with the admin's seal (docs/security.md)."""
    admin = Client(settings).admin  # a stack that is not running says so first
    seal = signer_seal.load(settings, signer_seal.KEEPER)  # made by `dev up` or compose's init
    done, unopened = signer_reseal.reseal(admin, seal)
    say(f"resealed {done} HMAC signer secret(s) under seal key {seal.active}")
    if unopened:
        raise click.ClickException(
            f"cannot open the sealed secret of {', '.join(unopened)}: restore the admin's "
            f"{signer_seal.NAME}.json, or register those signers again"
        )


@authority.group()
def policy() -> None:
    """Each app's Cedar policy versions (deploy, list, show, rollback), and the compatibility rule
    (gate 4) for a task whose policy or tool catalog differs from what is deployed."""


policy_cmds.register(policy)


@policy.command("set")
@app_option
@click.option(
    "--policy",
    "policy_version",
    default=None,
    help="Deprecated: the label tasks of an app with no policy version deployed are stamped with.",
)
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
    if policy_version and client.policies.version(client.app.name) is not None:
        say(
            f"note: app {client.app.name} has policy versions: its tasks are stamped with the one in "
            "force (`wakeful authority policy list`); --policy labels only apps with none"
        )
