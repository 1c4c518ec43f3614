"""Gate 4: the versions a task started with against what is deployed now, by declared rule.

pin: keep running under the stamped version; migrate: re-stamp the task with the deployed version;
quarantine: park the task for a person. A tool catalog whose contract is unchanged (only the tools'
descriptions or egress were reworded, sdk.tools.catalog) is no change at all: the task keeps its
stamp, and with it the wording it started with (workflow/wording.py, D119), whatever the rule; a
task stamped before the contract was told apart is re-stamped with it, for tools that are the same.
Schema versions are handled where records are decoded (registered migrations; a newer unknown
version is refused).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import ValidationError

from wakeful.authority.snapshot import Snapshot
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk.app import App
from wakeful.sdk.tools import contract_of
from wakeful.workflow import engine, rollouts


def rules_for(app: App, auth: Snapshot) -> dict[str, str]:
    """The rule for each stamp, for `app`'s tasks: an operator's rules for the app, else the app's
    declared ones (App.compat), else the rules set for every app, else the defaults."""
    return {**auth.compat, **app.compat, **auth.compat_by_app.get(app.name, {})}


def check_app(app: App, cp: Checkpoint, auth: Snapshot) -> Checkpoint | str:
    """check() for a task of `app`, by the rules that apply to it, against its deployed tools."""
    return check(cp, auth, app.catalog, app.legacy_catalog, rules=rules_for(app, auth))


def check(
    cp: Checkpoint, auth: Snapshot, catalog: str, legacy: str = "", *, rules: Mapping[str, str] | None = None
) -> Checkpoint | str:
    """The checkpoint to go on with (re-stamped where the rule says migrate), or why to quarantine.
    `catalog` is the deployed tool catalog: the loaded app's (sdk.tools.catalog); `legacy`, what a
    task stamped before its two parts were told apart was stamped with for the same tools; `rules`,
    the rule per stamp (rules_for; unset: the snapshot's rules for every app)."""
    declared = auth.compat if rules is None else rules
    tools = cp.versions.tool_catalog
    if tools != catalog and same_tools(tools, catalog, legacy):
        if contract_of(tools) is None:  # stamped before its two parts: no wording of its own to keep
            cp = cp.model_copy(update={"versions": cp.versions.model_copy(update={"tool_catalog": catalog})})
        catalog = cp.versions.tool_catalog  # the same contract: the task keeps its wording (D119)
    changed = {
        name: (stamped, live)
        for name, stamped, live in (
            ("policy", cp.versions.policy, auth.policy),
            ("tool_catalog", cp.versions.tool_catalog, catalog),
        )
        if stamped != live
    }
    applied = {name: declared.get(name, "quarantine") for name in changed}
    if any(rule not in ("pin", "migrate") for rule in applied.values()):
        return ", ".join(f"{n} {a} -> {b} ({applied[n]})" for n, (a, b) in changed.items())
    update = {name: live for name, (_, live) in changed.items() if applied[name] == "migrate"}
    if not update:
        return cp
    return cp.model_copy(update={"versions": cp.versions.model_copy(update=update)})


def same_tools(stamped: str, catalog: str, legacy: str) -> bool:
    """Whether a task stamped `stamped` was admitted under the tools deployed as `catalog`: the same
    contract, or (a stamp from before) the same tools exactly."""
    contract = contract_of(stamped)
    return contract == contract_of(catalog) if contract is not None else bool(legacy) and stamped == legacy


def workflow_version(app: App, cp: Checkpoint, auth: Snapshot | None = None) -> Checkpoint | str:
    """The task under the workflow version it will run, or why to quarantine it. A task of the
    deployed version goes on; one of an older version is migrated by the deployed version's
    declared function (its state re-validated, the version re-stamped), else pinned to the older
    version if the app keeps it (App.retired), else quarantined. Under a rollout (`auth`'s, D122)
    the deployed version is the one the rollout gives the task's tenant; a task of a newer one
    runs its own, kept. Raises engine.UnknownWorkflow for a workflow the app does not run at all
    (the wake is kept for a worker that runs it)."""
    name, version = cp.business.workflow, cp.business.workflow_version
    current = app.workflow(name)
    if current is None:
        raise engine.UnknownWorkflow(name)
    rollout = rollouts.of(app, name, current.version, auth.rollouts) if auth is not None else None
    if rollout is not None:
        aimed = rollouts.target(rollout, current.version, cp.security.tenant)
        current = app.workflow_at(name, aimed) or current
    label = f"workflow {name} v{version} -> v{current.version}"
    step = current.migrate.get(version) if version != current.version else None
    if step is None:
        runs = app.workflow_at(name, version)  # the deployed version, or one the app keeps (pinned)
        if runs is None:
            return f"{label}: no migration from v{version}, and the app does not keep v{version}"
        try:
            runs.state.model_validate(cp.business.data, strict=False)
        except ValidationError as exc:  # a redeploy changed the model under the same version
            return f"workflow {name} v{version}: the task's state no longer validates: {_first(exc)}"
        return cp
    try:
        migrated = step(dict(cp.business.data))
        data = current.state.model_validate(migrated, strict=False).model_dump(mode="json")
    except Exception as exc:  # the app's own code: whatever it raises, the task waits for a person
        return f"{label}: the migration failed: {_first(exc)}"
    business = cp.business.model_copy(update={"workflow_version": current.version, "data": data})
    return cp.model_copy(update={"business": business})


def release_to(app: App, cp: Checkpoint, to_version: int, auth: Snapshot) -> Checkpoint | str:
    """A quarantined task as a person releases it to workflow version `to_version` of `app`, or why
    it cannot be. The deployed version: the task's own, or one the deployed version migrates from
    (the migration runs here). The task's own version: re-pinned, if the app still runs or keeps it.
    Either way its state must validate under that version's model, and each stamp whose rule is
    quarantine is re-stamped with the deployed one (the person looked at the change), so the task's
    next wake goes on. Pure: the caller writes what it returns."""
    name, version = cp.business.workflow, cp.business.workflow_version
    current = app.workflow(name)
    if current is None:
        return f"app {app.name} runs no workflow {name!r}: release it with an app that does"
    kept = sorted({v for (n, v) in app.kept_versions() if n == name} | {current.version})
    if to_version == current.version and version != current.version:
        step = current.migrate.get(version)
        if step is None:
            return (
                f"workflow {name} v{current.version} declares no migration from v{version}; "
                f"release to v{version} if the app keeps it (it runs {', '.join(f'v{v}' for v in kept)})"
            )
        try:
            data = current.state.model_validate(step(dict(cp.business.data)), strict=False).model_dump(
                mode="json"
            )
        except Exception as exc:  # the app's own code
            return f"workflow {name} v{version} -> v{current.version}: the migration failed: {_first(exc)}"
    elif to_version == version:
        runs = app.workflow_at(name, version)
        if runs is None:
            return f"the app no longer keeps workflow {name} v{version}; release to v{current.version}"
        try:
            data = runs.state.model_validate(cp.business.data, strict=False).model_dump(mode="json")
        except ValidationError as exc:
            return f"workflow {name} v{version}: the task's state does not validate: {_first(exc)}"
    else:
        return (
            f"task runs workflow {name} v{version}: release it to v{version} (re-pin) or to the "
            f"deployed v{current.version} (migrate), not v{to_version}"
        )
    rules = rules_for(app, auth)
    stamps = {
        stamp: live
        for stamp, live in (("policy", auth.policy), ("tool_catalog", app.catalog))
        if rules.get(stamp, "quarantine") not in ("pin", "migrate")
    }
    business = cp.business.model_copy(update={"workflow_version": to_version, "data": data})
    versions = cp.versions.model_copy(update=stamps)
    return cp.model_copy(update={"business": business, "versions": versions})


def restamped(old: Checkpoint, new: Checkpoint) -> dict[str, str]:
    """What gate 4 (or a release) moved between the task as read and as written: the workflow
    version and each version stamp that differs, as "from -> to", for the task's history."""
    moved = {
        name: f"{a} -> {b}"
        for name, a, b in (
            ("policy", old.versions.policy, new.versions.policy),
            ("tool_catalog", old.versions.tool_catalog, new.versions.tool_catalog),
        )
        if a != b
    }
    was, now = old.business.workflow_version, new.business.workflow_version
    return ({"workflow": f"{old.business.workflow} v{was} -> v{now}"} if was != now else {}) | moved


def _first(exc: Exception) -> str:
    """An error in one bounded line, for a quarantine's reason."""
    lines = str(exc).splitlines() or [""]
    return f"{type(exc).__name__}: {' '.join(line.strip() for line in lines[:3])[:200]}"
