"""A gate's or an executor's start, for the release it runs (D121): an app that declares owner
roles runs only a release (workflow/release_digest.py) its owners signed, one principal per
role, each sign-off verified against the signer registry (authority/signoffs.py). Anything less
stops the role at start with every problem named and the command that signs: no message of a
release nobody signed is ever handled."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from wakeful.authority import signoffs
from wakeful.authority.signoffs import SignOff
from wakeful.authority.store import AuthorityStore
from wakeful.core.errors import ConfigError
from wakeful.sdk.app import App
from wakeful.state.releases import Releases
from wakeful.workflow import release_digest


def signed(
    client: Any, app: str, digest: str, owners: Mapping[str, Sequence[str]]
) -> tuple[list[SignOff], list[str]]:
    """The stored sign-offs of `digest` (a release's, or an authority change's: D124) that count,
    and why it may not go ahead ([]: it may)."""
    held = list(map(signoffs.decode, Releases(client, app).signoffs(digest, owners)))
    auth = AuthorityStore(client).snapshot(with_signers=True)
    unread = [f"a stored sign-off is unreadable: {s}" for s in held if isinstance(s, str)]
    read = [s for s in held if not isinstance(s, str)]
    found = signoffs.problems(app, digest, owners, read, auth)
    return [s for s in read if signoffs.invalid(s, owners, auth) is None], [*found, *unread] if found else []


def problems(client: Any, app: App) -> tuple[str, list[str]]:
    """The app's release digest, and why it may not run ([]: it may, or it declares no owners)."""
    digest = release_digest.of(app)
    return digest, signed(client, app.name, digest, app.owners)[1] if app.owners else []


def check(client: Any, app: App) -> str:
    """The release digest this role runs; ConfigError if its owners have not signed it."""
    digest, found = problems(client, app)
    if found:
        raise ConfigError(
            "release",
            f"app {app.name}'s release {digest[:12]} is not signed by its owners: {'; '.join(found)}. "
            f"Each owner signs it with `wakeful release sign --app <module:attr> --role <role> --as "
            f"<principal>`; `wakeful release show --app <module:attr>` says who has",
        )
    return digest
