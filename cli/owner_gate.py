"""The authority changes an app's owners sign before the CLI writes them (D124): the approval
limit, a policy version deployed or rolled back, a rollout started, widened or taken back. For an
app that declares owners, the command stores the change as a proposal, says its digest and who
must sign it, and writes nothing until each owner role holds a valid sign-off of that digest from
a principal of its own (authority/signoffs.py); then it writes, and logs who signed.

Whose app: the app loaded (`--app MODULE:ATTR`, or $WAKEFUL_APP) when it is the one named; else
the owners its gates and executors published with their release at start (D121)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import click
import orjson

from wakeful.authority.signoffs import SignOff
from wakeful.consumers.kafka import releases
from wakeful.core.log import Log
from wakeful.core.settings import Settings
from wakeful.operate.client import Client
from wakeful.sdk.app import App, load_app
from wakeful.state.releases import Releases
from wakeful.state.wording import Wordings
from wakeful.workflow.changes import Change

_LOG = Log(role="admin")


def owners_of(
    settings: Settings, client: Client, name: str, app: App | None = None
) -> Mapping[str, Sequence[str]]:
    """The owner roles of app `name` (role -> principals); empty: it declares none."""
    if app is None:
        try:
            loaded = load_app(settings.app)
        except Exception:  # the loaded app is another's, or none: the roles' published release says
            loaded = None
        app = loaded if loaded is not None and loaded.name == name else None
    if app is not None:
        return app.owners
    raw = Wordings(client.admin, name).deployed_release()
    try:
        parts = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        parts = {}
    owners = parts.get("owners") if isinstance(parts, dict) else None
    return {str(r): [str(p) for p in who] for r, who in owners.items()} if isinstance(owners, dict) else {}


def require(settings: Settings, client: Client, change: Change, app: App | None = None) -> list[SignOff]:
    """The owners' valid sign-offs of `change` ([] for an app with no owners); ClickException,
    with nothing written but the proposal, while any owner role lacks one."""
    owners = owners_of(settings, client, change.app, app)
    if not owners:
        return []
    digest, stored = change.digest(), Releases(client.admin, change.app)
    proposal = {
        "change": change.kind,
        "value": dict(change.value),
        "proposed_at": datetime.now(UTC).isoformat(),
    }
    stored.propose(digest, orjson.dumps(proposal))
    valid, found = releases.signed(client.admin, change.app, digest, owners)
    if found:
        raise click.ClickException(
            f"{change.said()}: its owners have not signed it ({'; '.join(found)}). Each owner signs "
            f"change {digest} with `wakeful release sign --app MODULE:ATTR --change {digest} --role ROLE "
            "--as PRINCIPAL`; then run this command again"
        )
    _LOG(
        "authority.change_signed",
        app=change.app,
        change=change.kind,
        digest=digest,
        signed_by=sorted(f"{s.principal} ({s.role})" for s in valid),
    )
    return valid
