"""What makes an app whole: every problem of its declarations, found at once when it is loaded, so
a mistake stops a role at start with what to fix, never a task mid-flight (sdk/app.py)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from wakeful.authority.revocations import RULES as REVOKED_RULES
from wakeful.authority.snapshot import COMPAT_RULES, COMPAT_STAMPS
from wakeful.core import ids
from wakeful.schemas import events
from wakeful.schemas.logs import UNDO_PREFIX
from wakeful.schemas.memory import FACT
from wakeful.sdk import retention
from wakeful.sdk.tools import Tool
from wakeful.sdk.workflow import (
    ANYONE,
    APPROVERS,
    MAX_APPROVAL_VALID_FOR,
    MAX_STEPS,
    REQUESTER,
    RUNTIME_STAGES,
    Workflow,
)
from wakeful.state.keys import APP_NAME, ATTRIBUTE_RE

if TYPE_CHECKING:
    from wakeful.sdk.app import App

# Kinds the runtime decides for every workflow; a workflow cannot take them over.
RUNTIME_KINDS = frozenset(
    {events.CREATE, events.APPROVE, events.RUN, events.REOPEN, events.COMPLETE, events.REPLAY, events.CANCEL}
)
REPROPOSALS_CAP = 20  # Workflow.max_reproposals: past this, asking again is a loop, not a retry


def problems(app: App) -> list[str]:
    """Every problem of the app's declarations (its own policy aside), each a line."""
    found: list[str] = []
    if not isinstance(app.name, str) or not APP_NAME.fullmatch(app.name):
        found.append(f"its name {app.name!r} must match {APP_NAME.pattern}")
    names = [wf.name for wf in app.workflows]
    if not names:
        found.append("it has no workflow")
    found += [f"two workflows are named {n!r}" for n in sorted({n for n in names if names.count(n) > 1})]
    tools = [t.name for t in app.tools]
    found += [f"two tools are named {n!r}" for n in sorted({n for n in tools if tools.count(n) > 1})]
    stages = set(RUNTIME_STAGES)
    for wf in app.workflows:
        declared = set(wf.stages) | {to for targets in wf.stages.values() for to in targets}
        stages |= declared
        found += [
            f"workflow {wf.name} takes over runtime event kind {k!r}" for k in set(wf.events) & RUNTIME_KINDS
        ]
        if not isinstance(wf.version, int) or wf.version < 1:
            found.append(f"workflow {wf.name} needs a version >= 1")
        found += _plan_problems(app, wf)
        found += _validity_problems(wf)
        found += _recall_problems(app, wf)
        found += _cancel_problems(app, wf)
        found += _shown_problems(wf)
        if not isinstance(wf.max_steps, int) or not 1 <= wf.max_steps <= MAX_STEPS:
            found.append(f"workflow {wf.name}'s max_steps {wf.max_steps!r} must be from 1 to {MAX_STEPS}")
        if not isinstance(wf.max_reproposals, int) or not 0 <= wf.max_reproposals <= REPROPOSALS_CAP:
            found.append(f"workflow {wf.name} needs max_reproposals of 0 to {REPROPOSALS_CAP}")
        if isinstance(wf.priority, bool) or not isinstance(wf.priority, int) or not 0 <= wf.priority <= 9:
            found.append(f"workflow {wf.name}'s priority {wf.priority!r} must be a whole number from 0 to 9")
        found += [
            f"workflow {wf.name} v{wf.version} migrates from v{v}, not an older version"
            for v in wf.migrate
            if not isinstance(v, int) or not 1 <= v < wf.version
        ]
    found += [
        f"compat names {name!r}; the stamps gate 4 compares are {', '.join(COMPAT_STAMPS)}"
        for name in app.compat
        if name not in COMPAT_STAMPS
    ]
    found += [
        f"compat {name}={rule!r} is not one of {', '.join(COMPAT_RULES)}"
        for name, rule in app.compat.items()
        if rule not in COMPAT_RULES
    ]
    found += _refresh_problems(app.refresh, tools)
    found += _owner_problems(app.owners)
    if app.revoked_signer not in REVOKED_RULES:
        found.append(f"revoked_signer={app.revoked_signer!r} is not one of {', '.join(REVOKED_RULES)}")
    current = {wf.name: wf.version for wf in app.workflows}
    kept = [(wf.name, wf.version) for wf in app.retired]
    found += [
        f"retired workflow {n} v{v} is not an older version of a workflow the app runs"
        for n, v in kept
        if not isinstance(v, int) or v >= current.get(n, 0)
    ]
    found += [
        f"retired workflow {n} v{v} is kept twice" for n, v in sorted({k for k in kept if kept.count(k) > 1})
    ]
    found += _fact_problems(app)
    found += retention.problems(app.retention)
    for tool in app.tools:
        found += [
            f"tool {tool.name} is offered at unknown stage {s!r}" for s in tool.stages if s not in stages
        ]
        if tool.output_trust not in ("trusted", "untrusted"):
            found.append(f"tool {tool.name}'s output_trust {tool.output_trust!r} is not trusted or untrusted")
        found += _completion_problems(tool)
        if "{task_id}" not in tool.op_key:
            found.append(f"tool {tool.name}'s op_key {tool.op_key!r} must contain {{task_id}}")
        else:
            found += _op_key_problems(tool.name, tool.key_for)
    return found


def _fact_problems(app: App) -> list[str]:
    found: list[str] = []
    names = [f.name for f in app.facts]
    found += [f"two facts are named {n!r}" for n in sorted({n for n in names if names.count(n) > 1})]
    for fact in app.facts:
        if not isinstance(fact.name, str) or not re.fullmatch(FACT, fact.name):
            found.append(f"fact {fact.name!r} must match {FACT}")
        found += [
            f"fact {fact.name}'s verifier {v!r} must be 'principal:<name>'"
            for v in fact.verifiers
            if not isinstance(v, str) or not re.fullmatch(rf"principal:{ids.KEY_ID}", v)
        ]
        if not isinstance(fact.keep, timedelta) or fact.keep <= timedelta(0):
            found.append(f"fact {fact.name} needs a positive keep (a timedelta)")
    return found


def _recall_problems(app: App, wf: Workflow[Any]) -> list[str]:
    recall = wf.recall
    if recall is None:
        return []
    found = [
        f"workflow {wf.name} recalls fact {f!r}, which the app does not declare"
        for f in recall.facts
        if f not in {fact.name for fact in app.facts}
    ]
    if not recall.facts:
        found.append(f"workflow {wf.name} recalls no fact")
    if not callable(recall.subjects):
        found.append(f"workflow {wf.name}'s recall needs a subjects function of the task's context")
    return found


def _shown_problems(wf: Workflow[Any]) -> list[str]:
    """What is wrong with the views and search attributes the workflow declares: each a function,
    under a name the task index can carry (state/keys.py)."""
    found: list[str] = []
    for what, declared in (("view", wf.views), ("attribute", wf.attributes)):
        if not isinstance(declared, Mapping):
            found.append(f"workflow {wf.name}'s {what}s must be a mapping of name -> function")
            continue
        for name, fn in declared.items():
            if not isinstance(name, str) or not ATTRIBUTE_RE.fullmatch(name):
                found.append(f"workflow {wf.name}'s {what} {name!r} must be named by {ATTRIBUTE_RE.pattern}")
            if not callable(fn):
                found.append(f"workflow {wf.name}'s {what} {name!r} is {type(fn).__name__}, not a function")
    return found


def _signer_problems(field: str, signers: object) -> list[str]:
    """What is wrong with a tuple of signers a declaration names (`field` says whose)."""
    if isinstance(signers, str) or not isinstance(signers, tuple):
        return [f"{field} must be a tuple of signers, not {type(signers).__name__}"]
    return [
        f"{field} names {who!r}: a signer is principal:<name>, {REQUESTER}, {APPROVERS} or {ANYONE}"
        for who in signers
        if who not in (REQUESTER, APPROVERS, ANYONE)
        and not (isinstance(who, str) and who.startswith("principal:") and len(who) > len("principal:"))
    ]


def _cancel_problems(app: App, wf: Workflow[Any]) -> list[str]:
    """Who may cancel the workflow's tasks, and what a cancel undoes: reversible tools of the app."""
    found = _signer_problems(f"workflow {wf.name}'s cancel_by", wf.cancel_by)
    if not wf.cancel_by:
        found.append(f"workflow {wf.name}'s cancel_by names no signer: say who may cancel its tasks")
    if isinstance(wf.undo_on_cancel, str) or not isinstance(wf.undo_on_cancel, tuple):
        return [*found, f"workflow {wf.name}'s undo_on_cancel must be a tuple of tool names"]
    for name in wf.undo_on_cancel:
        tool = app.tool(name)
        if tool is None:
            found.append(f"workflow {wf.name}'s undo_on_cancel names unknown tool {name!r}")
        elif not tool.reversible:
            found.append(f"workflow {wf.name}'s undo_on_cancel names {name!r}, a tool with no undo")
    return found


def _completion_problems(tool: Tool[Any]) -> list[str]:
    """What is wrong with who may complete an asynchronous tool's call, and its deadline rule."""
    if not tool.completed_by:
        return []
    found = _signer_problems(f"tool {tool.name}'s completed_by", tool.completed_by)
    if isinstance(tool.completed_by, str):
        return found
    rule = tool.on_deadline if isinstance(tool.on_deadline, str) else ""
    if not (rule == "expire" or re.fullmatch(r"escalate(:[a-z0-9_.-]{1,40})?", rule)):
        found.append(f"tool {tool.name}'s on_deadline {tool.on_deadline!r} is expire or escalate:<owner>")
    return found


def _validity_problems(wf: Workflow[Any]) -> list[str]:
    valid = wf.approval_valid_for
    if isinstance(valid, timedelta) and timedelta(0) < valid <= MAX_APPROVAL_VALID_FOR:
        return []
    return [
        f"workflow {wf.name}'s approval_valid_for {valid!r} must be a timedelta above 0 and at most "
        f"{MAX_APPROVAL_VALID_FOR.days} days (e.g. timedelta(hours=8)): how long an approval stays good"
    ]


def _plan_problems(app: App, wf: Workflow[Any]) -> list[str]:
    """Why the workflow's approval plan cannot be followed, if so: it names no tool, a tool the app
    lacks, or a read-only one (which needs no approval)."""
    plan = wf.approval_plan
    if plan is None:
        return []
    if not plan.tools:
        return [f"workflow {wf.name}'s approval_plan names no tool"]
    tools = {t.name: t for t in app.tools}
    found = [
        f"workflow {wf.name}'s approval_plan names unknown tool {n!r}" for n in plan.tools if n not in tools
    ]
    found += [
        f"workflow {wf.name}'s approval_plan names read-only tool {n!r}: it needs no approval"
        for n in plan.tools
        if n in tools and not tools[n].effect
    ]
    if plan.total and plan.total not in wf.state.model_fields:
        found.append(f"workflow {wf.name}'s approval_plan total {plan.total!r} is not a field of its state")
    return found


# The longest task id (a tenant's name and its own id, D52) at a version no task reaches.
_LONGEST_TASK = f"{'t' * 64}.{'i' * 64}"


def _op_key_problems(name: str, key_for: Callable[[str, int, int], str]) -> list[str]:
    """Why the op keys a tool forms may not name a downstream's records (or its undo's), if so."""
    try:
        longest = UNDO_PREFIX + key_for(_LONGEST_TASK, 2**31, MAX_STEPS)
    except (KeyError, IndexError, ValueError) as exc:
        return [f"tool {name}'s op_key cannot be formed from tool, task_id and version: {exc!r}"]
    if not re.fullmatch(ids.OP_KEY, longest):
        return [
            f"tool {name}'s op keys must match {ids.OP_KEY} behind {UNDO_PREFIX!r} for every task id: "
            f"one is {len(longest)} characters ({longest[:40]}...); use a shorter op_key or tool name"
        ]
    return []


def _refresh_problems(refresh: object, tools: list[str]) -> list[str]:
    """App.refresh: tool names of the app (D119)."""
    if isinstance(refresh, str) or not isinstance(refresh, list | tuple):
        return [f"refresh must be a list of tool names, not {refresh!r}"]
    return [f"refresh names {n!r}, which is not one of its tools" for n in refresh if n not in tools]


def _owner_problems(owners: Any) -> list[str]:
    """`owners`: role -> the principals who hold it; two roles at least, when declared (D121)."""
    if not owners:
        return []
    if not isinstance(owners, Mapping) or len(owners) < 2:
        return ["owners names two roles at least (say business and security), each with its principals"]
    found = [f"owner role {r!r} must match {ids.NAME}" for r in owners if not ids.NAME_RE.fullmatch(str(r))]
    for role, who in owners.items():
        if (
            isinstance(who, str)
            or not who
            or not all(isinstance(p, str) and ids.KEY_ID_RE.fullmatch(p) for p in who)
        ):
            found.append(f"owner role {role!r} names its principals, a list of names matching {ids.KEY_ID}")
    return found
