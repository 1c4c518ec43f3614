"""A Cedar policy sees what a tool reaches (D116): the check of a proposal sends the tool's declared
egress as `context.egress`, a Set of Strings, so a policy can forbid a tool by a name or a host it
declares; a tool that declares nothing sends no such attribute."""

from __future__ import annotations

from wakeful.authority import documents, policy
from wakeful.authority.snapshot import Snapshot

TEXT = """
permit (principal, action, resource);
@reason("{action} reaches the mail relay, which this tenant may not use")
forbid (principal, action, resource)
when { context has egress && context.egress.contains("smtp.example:25") };
"""


def decided(context: dict[str, object]) -> policy.Authorization:
    auth = Snapshot(approvers=frozenset(), limit=0, app="any", shipped=documents.parse(TEXT))
    return policy.authorize("ann", "notify", {"task": "t-1"}, auth, context)


def test_a_policy_can_forbid_a_tool_by_a_host_it_declares() -> None:
    refused = decided({"egress": ["bank", "smtp.example:25"]})
    assert not refused.allowed
    assert refused.reason == "notify reaches the mail relay, which this tenant may not use"


def test_a_tool_that_declares_other_hosts_or_none_is_allowed() -> None:
    assert decided({"egress": ["bank"]}).allowed
    assert decided({}).allowed


def test_what_is_not_a_set_of_strings_is_never_sent_as_egress() -> None:
    assert decided({"egress": ["smtp.example:25", 3]}).allowed  # dropped, as any value Cedar cannot hold
