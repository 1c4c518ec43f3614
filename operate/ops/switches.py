"""The ops page's kill path (D76): what a form asks for, checked, and throwing it through what the CLI
calls (`wakeful freeze`/`thaw`: operate/kill.py; `wakeful tools disable`/`enable`: the tool store).

A switch is thrown only by an operator (a principal with a signer key that may send task.reopen,
as the CLI's `--by` must be), named by the session, checked again at the moment it is thrown.
After it, however it ended, `on_change` runs: the CLI's own step that puts a sealed copy of the
changed authority on wakeful.authority (cli/recover_cmd.py's journal, handed in by `wakeful ops`).
"""

from __future__ import annotations

from collections.abc import Callable

from wakeful.authority import freezes
from wakeful.core.errors import ConfigError
from wakeful.operate import kill
from wakeful.operate import release as release_task
from wakeful.operate.client import Client
from wakeful.operate.ops.render import Switch

FREEZE_WAIT_S = 5.0  # as `wakeful freeze`'s default --wait-s
THAW_WAIT_S = 5.0  # as `wakeful thaw`'s
REASON_CHARS = 500


def operators(client: Client) -> dict[str, frozenset[str]]:
    return release_task.operators(client.authority.snapshot(with_signers=True))


def asked(form: dict[str, str], by: str, client: Client) -> tuple[Switch, dict[str, str]]:
    """The switch a form asks for, checked (ValueError or ConfigError says what is wrong), and the
    fields that name it again on the confirmation's form."""
    action, reason = form.get("action", ""), form.get("reason", "").strip()[:REASON_CHARS]
    if action in ("freeze", "thaw"):
        kind, name = form.get("kind", ""), form.get("name", "").strip()
        scope = freezes.scope(kind, name)
        fields = {"action": action, "kind": kind, "name": name, "reason": reason}
        return Switch(action, scope, reason, by), fields
    if action in ("disable", "enable"):
        tool = form.get("tool", "")
        if tool not in client.tool_names():
            raise ValueError(f"app {client.app.name} has no tool {tool[:64]!r}")
        fields = {"action": action, "tool": tool, "reason": reason}
        return Switch(action, tool, reason, by, client.app.name), fields
    raise ValueError(f"no such switch: {action[:20]!r}")


def needs_reason(s: Switch) -> None:
    if s.action in ("freeze", "disable") and not s.reason:
        raise ValueError("say why: the reason is recorded and shown to whoever meets the switch")


def throw(client: Client, s: Switch, on_change: Callable[[], object]) -> str:
    """Throw the switch as `s.by`; returns what happened, in one line."""
    if s.by not in operators(client):
        raise ConfigError(
            "operator", f"{s.by!r} is no longer an operator: no signer key of theirs may send task.reopen"
        )
    needs_reason(s)
    authority, tools = client.authority, client.tools
    try:
        if s.action == "freeze":
            taken = kill.freeze(authority, s.target, s.by, s.reason, FREEZE_WAIT_S)
            if taken.pending:
                return (
                    f"frozen {s.target}, but not yet taken in by {', '.join(taken.pending)}: "
                    "a step one of them judged before the freeze may still begin; `wakeful frozen` shows them"
                )
            return f"frozen {s.target}; taken in by {len(taken.done)} live roles in {taken.waited_ms:.0f} ms"
        if s.action == "thaw":
            was, woken, _ = kill.thaw(authority, s.target, s.by, s.reason or "thawed", THAW_WAIT_S)
            return (
                f"thawed {s.target}; woke {len(woken)} tasks with held work"
                if was
                else f"{s.target} was not frozen"
            )
        known = client.tool_names()
        if s.action == "disable":
            done = tools.disable(s.app, s.target, by=s.by, reason=s.reason, known=known)
            return (
                f"tool {s.target} of app {s.app} is disabled"
                if done
                else f"tool {s.target} was disabled already"
            )
        had = tools.enable(s.app, s.target, by=s.by, reason=s.reason, known=known)
        return f"tool {s.target} of app {s.app} is enabled" if had else f"tool {s.target} was enabled already"
    finally:
        on_change()
