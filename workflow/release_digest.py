"""What a release is (D121): the app as it is about to run, named by one digest that its owners
sign (authority/signoffs.py).

The digest covers everything a deploy changes of an app: its workflows and the versions it keeps,
its tools' contract and wording (their catalog stamp, sdk/tools.py), the policy text it ships, its
declared rules (compat, refresh, retention, revoked signers), its owner roles, and the bytes of
every source file that defines its workflows' code, its tools, its state types and the app itself.
Change any of these, even a line of a tool's call, and it is another release that needs its own
sign-offs. What it does not cover: the runtime's own code, modules the app's code imports from
elsewhere (a downstream's client library), and the authority store (policy versions set with
`wakeful authority policy set`, limits), which keeps its own history.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from wakeful.sdk.app import App

RUNTIME = "wakeful."
BUNDLED = ("wakeful.examples.", "wakeful.bench.")  # apps shipped with the runtime count as apps


def parts(app: App) -> dict[str, Any]:
    """What the digest is taken over, readable: `wakeful release check` shows it."""
    return {
        "app": app.name,
        "workflows": sorted(f"{name}@{version}" for name, version in app.kept_versions()),
        "catalog": app.catalog,
        "policy": hashlib.sha256(app.policy.encode()).hexdigest(),
        "rules": {
            "compat": dict(sorted(app.compat.items())),
            "refresh": sorted(app.refresh),
            "revoked_signer": app.revoked_signer,
            "retention": repr(app.retention),
        },
        "owners": {role: sorted(who) for role, who in sorted(app.owners.items())},
        "code": {name: _file_digest(name) for name in sorted(modules(app))},
    }


def digest(app: App) -> str:
    """The release's name: the SHA-256 of its parts, as canonical JSON."""
    return hashlib.sha256(orjson.dumps(parts(app), option=orjson.OPT_SORT_KEYS)).hexdigest()


_known: dict[int, tuple[App, str]] = {}  # an app's digest, kept while it is loaded (its files do not change)


def of(app: App) -> str:
    """digest(app), taken once per loaded app: the executor names it on every close."""
    kept = _known.get(id(app))
    if kept is None or kept[0] is not app:
        kept = _known[id(app)] = (app, digest(app))
    return kept[1]


def modules(app: App) -> set[str]:
    """The modules that define the app's code (its own, not the runtime's)."""
    found: set[str] = set()
    for obj in _defined(app):
        name = getattr(obj, "__module__", None) or ""
        if name and (not name.startswith(RUNTIME) or name.startswith(BUNDLED)):
            found.add(name)
    return {m for m in found if m in sys.modules and m.split(".")[0] != "builtins"}


def _defined(app: App) -> Iterator[Any]:
    for wf in (*app.workflows, *app.retired):
        yield from (wf.start, wf.check, wf.done, wf.reopen, wf.failed, wf.needs_approval, wf.card, wf.state)
        yield from wf.migrate.values()
        for accept in wf.events.values():
            yield from (getattr(accept, f.name) for f in dataclasses.fields(accept))
    for tool in app.tools:
        yield type(tool)
        yield getattr(tool, "args", None)


def _file_digest(module: str) -> str:
    path = getattr(sys.modules[module], "__file__", None)
    if not path:
        return "no-file"
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "unreadable"
