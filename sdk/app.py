"""An app: the workflows and tools the roles drive, loaded from `module:attribute`.

Every role loads the same app: `--app module:attribute` or `WAKEFUL_APP`, else the bundled example
app (DEFAULT_APP). Loading checks the app whole, so a mistake stops the role at start with what to
fix, never a task mid-flight.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, get_args

from wakeful.authority import documents, schema
from wakeful.authority.documents import Policy
from wakeful.core.errors import ConfigError
from wakeful.sdk import app_checks
from wakeful.sdk.memory import Fact
from wakeful.sdk.retention import DEFAULT as DEFAULT_RETENTION
from wakeful.sdk.retention import Retention
from wakeful.sdk.tools import Tool, catalog, legacy_catalog
from wakeful.sdk.workflow import Workflow

# The bundled example app: what the roles drive when neither --app nor WAKEFUL_APP names one.
DEFAULT_APP = "wakeful.examples.refund:app"
ENV = "WAKEFUL_APP"
RUNTIME_KINDS = app_checks.RUNTIME_KINDS  # kinds the runtime decides for every workflow


@dataclass(frozen=True)
class App:
    """Workflows and tools. `retired` keeps older versions of its workflows, whose waiting tasks
    run their own version's code ("pin") where the current version declares no migration from it.
    `compat` declares what gate 4 does to a task stamped with another policy or tool-catalog
    contract than the deployed one: {"policy" | "tool_catalog": "pin" | "migrate" | "quarantine"}
    (unset: policy pin, tool_catalog quarantine; an operator's rules for the app outrank these).
    `revoked_signer` says what becomes of a task whose requester or approver was revoked
    (`wakeful authority signers revoke`): "review" (parked for a person) or "continue".
    `story` and `traffic` name (module:attribute) the app's demo story and its load generator for
    `wakeful demo`, `bench` and `chaos`; roles never load them. `policy` is the Cedar text the app
    ships (a `.cedar` file beside it, read with policy_file()): `wakeful authority init` deploys it
    as the app's first version when none is, and a task stamped before the app's policy had
    versions is judged by it. `refresh` names the tools whose deployed wording (description,
    egress) reaches tasks that started under another: the rest show each task the wording it
    started with, and an egress widened for a tool not named here is refused at deploy (D119).
    `owners` names who must sign a release before it runs (D121)."""

    name: str
    workflows: Sequence[Workflow[Any]]
    tools: Sequence[Tool[Any]] = ()
    story: str | None = None
    traffic: str | None = None
    retired: Sequence[Workflow[Any]] = ()
    compat: Mapping[str, str] = field(default_factory=dict)
    revoked_signer: str = "review"
    policy: str = ""
    facts: Sequence[Fact] = ()  # the classes of fact its decisions may remember (sdk/memory.py)
    # How long its finished tasks, receipts, evidence and memory stay in Redis (sdk/retention.py).
    retention: Retention = DEFAULT_RETENTION
    refresh: Sequence[str] = ()
    # Who signs its releases (D121): role -> the principals who hold it, two roles at least (say
    # "business" and "security"). Declared, a gate or executor starts only on a release that holds
    # a sign-off for each role from a different principal (`wakeful release sign`).
    owners: Mapping[str, Sequence[str]] = field(default_factory=dict)
    _by_name: dict[str, Workflow[Any]] = field(init=False, repr=False, default_factory=dict)
    _by_version: dict[tuple[str, int], Workflow[Any]] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        problems = app_checks.problems(self)
        if not problems and self.policy:  # its own policy, against what the app declares
            found = documents.problems(self.policy) or self.check_policy(self.policy)
            problems = [f"its policy: {p}" for p in found]
        if problems:
            raise ConfigError(f"app {self.name}", "; ".join(problems))
        self._by_name.update({wf.name: wf for wf in self.workflows})
        self._by_version.update({(wf.name, wf.version): wf for wf in (*self.retired, *self.workflows)})

    def workflow(self, name: str) -> Workflow[Any] | None:
        """The deployed (current) version of the workflow `name`."""
        return self._by_name.get(name)

    def workflow_at(self, name: str, version: int) -> Workflow[Any] | None:
        """Version `version` of the workflow `name`: the current one or one the app keeps."""
        return self._by_version.get((name, version))

    def kept_versions(self) -> tuple[tuple[str, int], ...]:
        """(workflow, version) of every workflow version the app runs: current and kept."""
        return tuple(self._by_version)

    def tool(self, name: str) -> Tool[Any] | None:
        return next((t for t in self.tools if t.name == name), None)

    @cached_property
    def fact_table(self) -> dict[str, Fact]:
        """The app's facts by name."""
        return {f.name: f for f in self.facts}

    def tools_at(self, stage: str) -> tuple[Tool[Any], ...]:
        return tuple(t for t in self.tools if stage in t.stages)

    @cached_property
    def catalog(self) -> str:
        return catalog(self.tools)

    @cached_property
    def shipped_policy(self) -> Policy | None:
        """The app's own policy text, parsed (documents.parse), or None if it ships none."""
        return documents.parse(self.policy) if self.policy else None

    @cached_property
    def policy_schema(self) -> str:
        """What the app's policy may name (authority/schema.py): the runtime's actions, the app's
        own event kinds and tools, and the state fields its workflows expose, typed."""
        fields: dict[str, str] = {}
        for wf in (*self.retired, *self.workflows):
            for name in wf.exposes:
                found = wf.state.model_fields.get(name)
                kind = _cedar_type(found.annotation) if found is not None else None
                if kind is not None:
                    fields[name] = kind
        kinds = {kind for wf in self.workflows for kind in wf.events}
        return schema.schema({*schema.RUNTIME_ACTIONS, *kinds, *(t.name for t in self.tools)}, fields)

    def check_policy(self, text: str) -> list[str]:
        """What in the Cedar `text` the app's schema does not allow (each named by its line)."""
        return schema.invalid(text, self.policy_schema)

    @cached_property
    def legacy_catalog(self) -> str:
        """What a task made before stamps of two parts was stamped with for these same tools."""
        return legacy_catalog(self.tools)

    @cached_property
    def kinds(self) -> frozenset[str]:
        """Every event kind a signer may be registered for under this app."""
        return RUNTIME_KINDS | {kind for wf in self.workflows for kind in wf.events}


def _cedar_type(annotation: Any) -> str | None:
    """The Cedar type of a state field's annotation (`int`, `str`, `bool`, or one of them | None)."""
    kinds = [a for a in get_args(annotation) if a is not type(None)] or [annotation]
    return schema.CEDAR_TYPES.get(kinds[0]) if len(kinds) == 1 else None


def policy_file(module_file: str, name: str) -> str:
    """The text of the policy file `name` beside the module file `module_file` (pass `__file__`)."""
    return Path(module_file).with_name(name).read_text(encoding="utf-8")


def load_app(spec: str | None = None) -> App:
    """The app `spec` names (`module:attribute`), else $WAKEFUL_APP, else the bundled example app."""
    spec = spec or os.environ.get(ENV) or DEFAULT_APP
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigError(ENV, f"{spec!r} is not module:attribute (e.g. {DEFAULT_APP})")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(ENV, f"cannot import {module_name!r} for app {spec!r}: {exc}") from exc
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        raise ConfigError(ENV, f"{spec!r} is {type(app).__name__}, not a wakeful.sdk.App")
    return app
