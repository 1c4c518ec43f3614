"""wakeful's SDK: declare an app (workflows and tools); the runtime drives it.

    from wakeful.sdk import App, Workflow, Tool, Next, Wait, Refuse, Review

An app is an importable object; run it with `wakeful worker all --app module:attribute` (or
WAKEFUL_APP). docs/agents.md builds one from scratch; the bundled example apps in `wakeful.examples` are
complete ones.
"""

from wakeful.authority.snapshot import Snapshot
from wakeful.core.egress_guard import EgressRefused, outbound_env
from wakeful.core.minting import Credential, credential
from wakeful.sdk.app import App, load_app, policy_file
from wakeful.sdk.memory import Fact, Recall, Remember
from wakeful.sdk.retention import Retention
from wakeful.sdk.tools import Pending, Tool, ToolFenced, ToolRefused, ToolUnavailable, catalog
from wakeful.sdk.views import Viewed
from wakeful.sdk.workflow import (
    ANYONE,
    APPROVAL_VALID_FOR,
    APPROVERS,
    CANCELLED,
    CANCELLING,
    CLOSED,
    MAX_APPROVAL_VALID_FOR,
    MAX_REPROPOSALS,
    NEEDS_REVIEW,
    QUARANTINED,
    REQUESTER,
    WORKFLOW_FIELD,
    Accept,
    Compensate,
    Context,
    Effect,
    Next,
    Plan,
    Refuse,
    Review,
    Sleep,
    Start,
    Wait,
    Workflow,
)

__all__ = [
    "ANYONE",
    "APPROVAL_VALID_FOR",
    "APPROVERS",
    "CANCELLED",
    "CANCELLING",
    "CLOSED",
    "MAX_APPROVAL_VALID_FOR",
    "MAX_REPROPOSALS",
    "NEEDS_REVIEW",
    "QUARANTINED",
    "REQUESTER",
    "WORKFLOW_FIELD",
    "Accept",
    "App",
    "Compensate",
    "Context",
    "Credential",
    "Effect",
    "EgressRefused",
    "Fact",
    "Next",
    "Pending",
    "Plan",
    "Recall",
    "Refuse",
    "Remember",
    "Retention",
    "Review",
    "Sleep",
    "Snapshot",
    "Start",
    "Tool",
    "ToolFenced",
    "ToolRefused",
    "ToolUnavailable",
    "Viewed",
    "Wait",
    "Workflow",
    "catalog",
    "credential",
    "load_app",
    "outbound_env",
    "policy_file",
]
