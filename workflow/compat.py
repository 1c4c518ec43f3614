"""Gate 4: the versions a task started with against what is deployed now, by declared rule.

pin: keep running under the stamped version; migrate: re-stamp the task with the deployed version;
quarantine: park the task for a person. Schema versions are handled where records are decoded
(registered migrations; a newer unknown version is refused).
"""

from __future__ import annotations

from wakeful.authority.snapshot import Snapshot
from wakeful.schemas.checkpoint import Checkpoint


def check(cp: Checkpoint, auth: Snapshot, catalog: str) -> Checkpoint | str:
    """The checkpoint to go on with (re-stamped where the rule says migrate), or why to quarantine.
    `catalog` is the deployed tool catalog: the loaded app's (sdk.tools.catalog)."""
    changed = {
        name: (stamped, live)
        for name, stamped, live in (
            ("policy", cp.versions.policy, auth.policy),
            ("tool_catalog", cp.versions.tool_catalog, catalog),
        )
        if stamped != live
    }
    rules = {name: auth.compat.get(name, "quarantine") for name in changed}
    if any(rule not in ("pin", "migrate") for rule in rules.values()):
        return ", ".join(f"{n} {a} -> {b} ({rules[n]})" for n, (a, b) in changed.items())
    update = {name: live for name, (_, live) in changed.items() if rules[name] == "migrate"}
    if not update:
        return cp
    return cp.model_copy(update={"versions": cp.versions.model_copy(update=update)})
