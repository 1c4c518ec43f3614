"""A decision is asked with only the attributes its policy text can read (authority/attributes.py):
leaving the others out never changes what Cedar decides."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import wakeful.examples
from wakeful.authority import documents, policy
from wakeful.authority.attributes import EVERYTHING, reads
from wakeful.authority.snapshot import Snapshot

NAMES = ("amount", "tier", "region", "vip", "approver", "stage", "limit")
VALUES = st.integers(-5, 5) | st.sampled_from(["eu", "us", "gold"]) | st.booleans()
EXAMPLES = Path(wakeful.examples.__file__).parent


def tree(text: str) -> dict[str, Any]:
    import cedarpy
    import orjson

    return dict(orjson.loads(cedarpy.policies_to_json_str(text)))


@pytest.mark.parametrize("name", ["refund.cedar", "onboarding.cedar", "support.cedar"])
def test_a_shipped_policy_reads_only_the_attributes_it_names(name: str) -> None:
    found = reads(tree((EXAMPLES / name).read_text()))
    assert not found.everything
    assert found.names  # each names a few
    if name in ("refund.cedar", "support.cedar"):
        assert found.names == {"requester", "amount", "app", "limit", "approver"}


@pytest.mark.parametrize(
    "condition",
    [
        'context == {"amount": 1}',  # the whole record, compared
        'context.amount == 1 && context != {"x": 1}',
        '{"c": context}.c has amount',
    ],
)
def test_a_policy_that_uses_the_whole_context_is_sent_every_attribute(condition: str) -> None:
    text = f"permit (principal, action, resource) when {{ {condition} }};"
    assert reads(tree(text)).everything


def test_a_node_the_reader_does_not_know_sends_every_attribute() -> None:
    doc = {"staticPolicies": {"p": {"conditions": [{"kind": "when", "body": {"novel": 3}}]}}}
    assert reads(doc).everything


POLICIES = st.lists(
    st.tuples(
        st.sampled_from(["permit", "forbid"]),
        st.sampled_from(["resource", "context"]),
        st.sampled_from(NAMES),
        st.sampled_from(["has", "==", ">", "guarded"]),
        VALUES,
    ),
    min_size=1,
    max_size=4,
)


def text_of(rules: list[tuple[str, str, str, str, object]]) -> str:
    out = []
    for effect, var, name, test, value in rules:
        literal = f'"{value}"' if isinstance(value, str) else str(value).lower()
        body = {
            "has": f"{var} has {name}",
            "==": f"{var}.{name} == {literal}",  # an error where it is absent: the policy is skipped
            ">": f"{var}.{name} > 0",
            "guarded": f"{var} has {name} && {var}.{name} == {literal}",
        }[test]
        out.append(f"{effect} (principal, action, resource) when {{ {body} }};")
    return "\n".join(out)


@settings(max_examples=150, deadline=None)
@given(
    rules=POLICIES,
    resource=st.dictionaries(st.sampled_from(NAMES), VALUES, max_size=5),
    context=st.dictionaries(st.sampled_from(NAMES), VALUES, max_size=5),
)
def test_leaving_out_what_the_policy_never_reads_never_changes_a_decision(
    rules: list[tuple[str, str, str, str, object]], resource: dict[str, Any], context: dict[str, Any]
) -> None:
    text = text_of(rules)
    parsed = documents.parse(text)
    everything = replace(parsed, reads=EVERYTHING)
    task = {"task": "t-1", **resource}

    def decided(shipped: documents.Policy) -> policy.Authorization:
        auth = Snapshot(approvers=frozenset({"ann"}), limit=3, app="any", shipped=shipped)
        return policy.authorize("ann", "act", task, auth, context)

    assert decided(parsed) == decided(everything)
