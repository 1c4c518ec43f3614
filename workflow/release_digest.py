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
from collections.abc import Iterator, Mapping
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
        # each tool's scope (the downstream it is minted a login of, D120) and egress (D116)
        "tools": {t.name: {"credential": t.credential or "", "egress": sorted(t.egress)} for t in app.tools},
        "code": {name: _file_digest(name) for name in sorted(modules(app))},
    }


def changes(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> list[str]:
    """What the release `after` changes against the one deployed last (`before`, its parts as the
    gate and executor stored them; None: none was): a reviewer's lines, one a change."""
    if before is None:
        return ["no release was deployed with its parts recorded: everything is new"]
    found = [
        f"workflow {w} added" for w in sorted(set(after["workflows"]) - set(before.get("workflows", ())))
    ]
    found += [
        f"workflow {w} no longer kept"
        for w in sorted(set(before.get("workflows", ())) - set(after["workflows"]))
    ]
    for part, said in (("catalog", "tool catalog"), ("policy", "shipped policy text"), ("rules", "rules"),
                       ("owners", "owners")):  # fmt: skip
        if before.get(part) != after[part]:
            found.append(f"{said}: {_short(before.get(part))} -> {_short(after[part])}")
    old, new = before.get("tools", {}), after["tools"]
    found += [
        f"tool {t} added: scope {new[t]['credential'] or 'none'}, egress {new[t]['egress']}"
        for t in sorted(set(new) - set(old))
    ]
    found += [f"tool {t} removed" for t in sorted(set(old) - set(new))]
    for t in sorted(set(old) & set(new)):
        if old[t].get("credential") != new[t]["credential"]:
            found.append(
                f"tool {t}: scope {old[t].get('credential') or 'none'} -> {new[t]['credential'] or 'none'}"
            )
        if old[t].get("egress") != new[t]["egress"]:
            found.append(f"tool {t}: egress {old[t].get('egress')} -> {new[t]['egress']}")
    code_before, code = before.get("code", {}), after["code"]
    found += [
        f"code {m}: {'changed' if m in code_before else 'added'}"
        for m in sorted(code)
        if code_before.get(m) != code[m]
    ]
    found += [f"code {m}: no longer part of the app" for m in sorted(set(code_before) - set(code))]
    return found


def _short(value: Any) -> str:
    text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    return text if len(text) <= 80 else text[:77] + "..."


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
