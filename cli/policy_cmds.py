"""`wakeful authority policy deploy|list|show|rollback`: an app's Cedar policy versions.

Each change is a new version, recorded with who, when, its digest and why; the roles read the
version in force at their next wake, and a task pinned to an older version is judged by that
version's text (docs/decisions.md D56).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

from wakeful.authority.documents import Version
from wakeful.authority.policy_store import PolicyStore, read_text
from wakeful.cli import owner_gate
from wakeful.cli.app_option import checked_app
from wakeful.cli.output import emit, say
from wakeful.core.errors import ConfigError
from wakeful.core.settings import Settings
from wakeful.operate.client import Client
from wakeful.workflow.changes import POLICY, Change, text_digest

F = TypeVar("F", bound=Callable[..., object])


def schema_check(settings: Settings, given: str | None, name: str) -> Callable[[str], list[str]] | None:
    """The schema check of the app named `name`, when it is the one `--app` loads or the loaded
    app; None (unchecked) for an app this process cannot load by its name alone."""
    if given is not None and ":" in given:
        return checked_app(given).check_policy
    loaded = checked_app(settings.app)
    return loaded.check_policy if loaded.name == name else None


def app_name(settings: Settings, given: str | None) -> str:
    """The app a command names: `--app` as a name (`expenses`) or as the app to load (`module:attr`);
    default the loaded app ($WAKEFUL_APP, else the bundled one)."""
    if given is not None and ":" not in given:
        return given
    return checked_app(given or settings.app).name


def app_name_option(command: F) -> F:
    return click.option(
        "--app",
        "app",
        default=None,
        metavar="NAME|MODULE:ATTR",
        help="The app (default: the loaded app, $WAKEFUL_APP, else the bundled one).",
    )(command)


def _signed(settings: Settings, given: str | None, name: str, value: dict[str, object]) -> None:
    """For an app that declares owners: they signed this change, made over the version in force
    (so a sign-off is good for one deploy, not for ever: D124)."""
    client = Client(settings)
    now = PolicyStore(client.admin).version(name)
    loaded = checked_app(given) if given and ":" in given else None
    change = Change(name, POLICY, {**value, "after": now.digest if now else ""})
    owner_gate.require(settings, client, change, loaded)


def _store(settings: Settings) -> PolicyStore:
    return PolicyStore(Client(settings).admin)


def _line(v: Version) -> str:
    return f"v{v.version}  {v.at}  {v.digest[:12]}  by {v.by}" + (f"  ({v.reason})" if v.reason else "")


def register(policy: click.Group) -> None:
    """Add the version commands to the `authority policy` group."""

    @policy.command("deploy")
    @click.argument("path", metavar="FILE.cedar")
    @app_name_option
    @click.option("--by", required=True, help="Who deploys it (recorded).")
    @click.option("--reason", default="", help="Why (recorded).")
    @click.pass_obj
    def deploy(settings: Settings, path: str, app: str | None, by: str, reason: str) -> None:
        """Deploy FILE.cedar as the app's next policy version: in force at the roles' next wake.
        Nothing is stored if the text does not parse or names what the app does not have (an
        action, an attribute); every problem is named."""
        name, text = app_name(settings, app), read_text(path)
        check = schema_check(settings, app, name)
        _signed(settings, app, name, {"text": text_digest(text)})
        version = _store(settings).deploy(name, text, by=by, reason=reason, check=check)
        say(f"policy {version.stamp} deployed ({version.digest[:12]}); roles read it at their next wake")
        if check is None:
            say(f"note: not checked against app {name}'s schema; give --app MODULE:ATTR to check it")

    @policy.command("list")
    @app_name_option
    @click.option("--json", "as_json", is_flag=True)
    @click.pass_obj
    def list_(settings: Settings, app: str | None, as_json: bool) -> None:
        """Every version of the app's policy, oldest first, with who deployed it, when and why."""
        versions = _store(settings).versions(app_name(settings, app))
        human = (
            "\n".join(map(_line, versions)) or "no policy version deployed: the app's own policy is in force"
        )
        emit([v.listed() for v in versions], as_json, human)

    @policy.command("show")
    @click.argument("version", required=False, type=click.IntRange(min=1))
    @app_name_option
    @click.option("--json", "as_json", is_flag=True)
    @click.pass_obj
    def show(settings: Settings, version: int | None, app: str | None, as_json: bool) -> None:
        """A version's Cedar text (default: the version in force)."""
        name = app_name(settings, app)
        found = _store(settings).version(name, version)
        if found is None:
            raise ConfigError("version", f"app {name} has no policy version {version or ''}".rstrip())
        emit(found.__dict__, as_json, f"# {_line(found)}\n{found.text}")

    @policy.command("rollback")
    @app_name_option
    @click.option("--by", required=True, help="Who rolls back (recorded).")
    @click.option("--reason", default=None, help='Why (recorded; default "rollback to vN").')
    @click.option("--to", "to", type=click.IntRange(min=1), default=None, help="The version to restore.")
    @click.pass_obj
    def rollback(settings: Settings, app: str | None, by: str, reason: str | None, to: int | None) -> None:
        """Restore an older text (default: the version before the one in force) as a new version."""
        name = app_name(settings, app)
        _signed(settings, app, name, {"rollback_to": to or 0})
        version = _store(settings).rollback(name, by=by, reason=reason, to=to)
        say(f"policy {version.stamp} deployed: {version.reason}")
