"""Tool wording is pinned like code (D119): what the model reads of a tool (its description) and
where the tool may connect (its egress) reach a sleeping task only when a deploy says so.

A task's catalog stamp (`catalog-<contract>.<wording>`, sdk/tools.py) names the wording it started
with; the gate and the executor publish each deployed wording under its digest (state/wording.py).
The window shows a task its pinned descriptions (`pinned`), except for the tools the app names in
`App.refresh`, which show the deployed one. An egress that gains an entry, against the wording
deployed before, reaches sleeping tasks whatever the stamp says (the executor enforces the loaded
code's), so it is refused at deploy unless the app names the tool in `refresh` (`widened`).
`changes` is what `wakeful release check` shows a reviewer.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from wakeful.sdk.app import App
from wakeful.sdk.tools import wording, wording_digest, wording_of

Entries = list[dict[str, Any]]
KEPT = 256  # digests a process keeps read (a digest's entries never change): a few per deploy


class Read:
    """Stored wordings by digest, each read once per process and checked (`verified`): `fetch`
    gives a digest's stored bytes (state/wording.Wordings.raw)."""

    def __init__(self, fetch: Callable[[str], bytes | None]) -> None:
        self.fetch = fetch
        self._kept: dict[str, Entries | None] = {}

    def __call__(self, digest: str) -> Entries | None:
        if digest not in self._kept:
            if len(self._kept) >= KEPT:
                self._kept.clear()
            self._kept[digest] = verified(digest, self.fetch(digest))
        return self._kept[digest]

    def of_stamp(self, stamp: str) -> Entries | None:
        """The wording a task's catalog stamp names, if stored and true to its digest."""
        digest = wording_of(stamp)
        return self(digest) if digest else None


def deployed(app: App) -> tuple[str, bytes]:
    """The app's wording as it is published: its digest and its stored bytes."""
    entries = wording(app.tools)
    return wording_digest(entries), orjson.dumps(entries)


def verified(digest: str, raw: bytes | None) -> Entries | None:
    """Stored wording entries, if `raw` is a list of {name, description, egress} whose digest is
    `digest`; None for anything else (a key in Redis is not trusted because it is there)."""
    if raw is None:
        return None
    try:
        found = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(found, list) or not all(_entry(e) for e in found):
        return None
    return found if wording_digest(found) == digest else None


def _entry(e: object) -> bool:
    return (
        isinstance(e, dict)
        and set(e) == {"name", "description", "egress"}
        and isinstance(e["name"], str)
        and isinstance(e["description"], str)
        and isinstance(e["egress"], list)
        and all(isinstance(x, str) for x in e["egress"])
    )


def pinned(app: App, stored: Entries | None) -> dict[str, str]:
    """tool -> the description the task's window shows, for each tool of the app whose wording the
    task is pinned to (its stored wording, `stored`) and the app does not refresh. Empty when the
    task's wording is not stored (a task stamped before wording was pinned): it reads the deployed."""
    if not stored:
        return {}
    fresh = set(app.refresh)
    return {e["name"]: e["description"] for e in stored if e["name"] not in fresh and app.tool(e["name"])}


def widened(app: App, before: Entries | None) -> list[str]:
    """Each tool whose egress gains an entry against the wording deployed before, and that the app
    does not name in `refresh`: the deploy is refused, naming each (empty: it may go on)."""
    old = {e["name"]: set(e["egress"]) for e in before or ()}
    fresh = set(app.refresh)
    found = []
    for entry in wording(app.tools):
        gained = sorted(set(entry["egress"]) - old.get(entry["name"], set(entry["egress"])))
        if gained and entry["name"] not in fresh:
            found.append(f"{entry['name']} reaches {', '.join(gained)} more")
    return found


def changes(app: App, before: Entries | None) -> list[str]:
    """What a reviewer reads of the deploy's wording against the one deployed before: each tool's
    description as a diff, its egress gained and lost, and whether sleeping tasks get it."""
    old: Mapping[str, dict[str, Any]] = {e["name"]: e for e in before or ()}
    fresh = set(app.refresh)
    lines: list[str] = []
    for entry in wording(app.tools):
        was = old.get(entry["name"])
        if was is None:
            continue
        reach = "refreshed for sleeping tasks" if entry["name"] in fresh else "sleeping tasks keep the old"
        if was["description"] != entry["description"]:
            lines.append(f"tool {entry['name']}: description changed ({reach})")
            lines += _diff(was["description"], entry["description"])
        gained = sorted(set(entry["egress"]) - set(was["egress"]))
        lost = sorted(set(was["egress"]) - set(entry["egress"]))
        if gained:
            verdict = reach if entry["name"] in fresh else "refused at deploy: name the tool in App.refresh"
            lines.append(f"tool {entry['name']}: egress + {', '.join(gained)} ({verdict})")
        if lost:
            lines.append(f"tool {entry['name']}: egress - {', '.join(lost)} (every task, at once)")
    return lines


def _diff(old: str, new: str) -> Sequence[str]:
    said = difflib.unified_diff(old.split(". "), new.split(". "), lineterm="", n=0)
    return [f"    {line}" for line in list(said)[2:] if not line.startswith("@@")]
