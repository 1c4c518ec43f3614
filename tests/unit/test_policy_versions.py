"""An app's policy versions, pure: numbering, rollback as a new version, every parse error named,
the stamp a task carries, and which text a stamp is judged by. No Redis, no Kafka."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from refund_rules import refund

from wakeful.authority import documents
from wakeful.authority.documents import Version
from wakeful.authority.policy import authorize
from wakeful.authority.snapshot import Snapshot, policy_reads, snapshot_from, with_policies
from wakeful.core.errors import ConfigError
from wakeful.examples.refund import app
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk import App, Effect, Review
from wakeful.workflow import effects

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 1, tzinfo=UTC)
ALLOW_ALL = "permit (principal, action, resource);\n"
FORBID_BIG = (
    ALLOW_ALL + '@reason("no refund above 1200, got {amount}")\n'
    'forbid (principal, action == Action::"refund", resource) when { context.amount > 1200 };\n'
)


def history(*texts: str) -> list[Version]:
    found: list[Version] = []
    for i, text in enumerate(texts):
        found.append(
            documents.new_version("refund", [v.version for v in found], text, by=f"p{i}", reason="", now=NOW)
        )
    return found


@pytest.mark.parametrize(("existing", "expected"), [([], 1), ([1], 2), ([1, 2, 3], 4), ([2, 7], 8)])
def test_a_new_version_is_numbered_after_the_highest_of_its_app(existing: list[int], expected: int) -> None:
    v = documents.new_version("refund", existing, ALLOW_ALL, by="alice", reason="r", now=NOW)
    assert (v.version, v.stamp, v.digest, v.by, v.reason) == (
        expected,
        f"policy-refund-v{expected}",
        documents.digest(ALLOW_ALL),
        "alice",
        "r",
    )


def test_a_version_round_trips_through_its_stored_form() -> None:
    v = history(ALLOW_ALL)[0]
    assert Version.decode(v.encode()) == v
    assert "text" not in v.listed()


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (
            "permit (principal, action, resource) when { 1 + };\nforbid (principal action, resource);",
            ["line 1", "line 2"],
        ),
        (
            "permit (principal, action, resource);\n\n// a comment; with a semicolon\n"
            "forbid (principal action, resource);",
            ["line 4"],
        ),
        (
            'permit (principal, action, resource) when { context.x == "a;b" };\n'
            "permit (principal, actio, resource);",
            ["line 2"],
        ),
        ("// nothing but a comment", ["no policy"]),
        ("", ["no policy"]),
    ],
)
def test_every_policy_that_does_not_parse_is_named_at_once_and_nothing_is_made(
    text: str, named: list[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        documents.new_version("refund", [], text, by="alice", reason="", now=NOW)
    for part in named:
        assert part in str(caught.value)
    assert str(caught.value).count("line ") == len([n for n in named if n.startswith("line")])


def test_a_deploy_names_who_deploys_it() -> None:
    with pytest.raises(ConfigError, match="--by"):
        documents.new_version("refund", [], ALLOW_ALL, by=" ", reason="", now=NOW)


@pytest.mark.parametrize(
    ("to", "restored", "reason"),
    [(None, ALLOW_ALL, "rollback to v1"), (1, ALLOW_ALL, "rollback to v1")],
)
def test_a_rollback_is_a_new_version_carrying_the_older_text(
    to: int | None, restored: str, reason: str
) -> None:
    versions = history(ALLOW_ALL, FORBID_BIG)
    back = documents.rollback_of(versions, to, by="carol", reason=None, now=NOW)
    assert (back.version, back.text, back.by, back.reason) == (3, restored, "carol", reason)
    again = documents.rollback_of([*versions, back], None, by="dave", reason="undo", now=NOW)
    assert (again.version, again.text, again.reason) == (4, FORBID_BIG, "undo")


@pytest.mark.parametrize(("versions", "to"), [(0, None), (1, None), (2, 2), (2, 5)])
def test_a_rollback_to_no_earlier_version_is_refused(versions: int, to: int | None) -> None:
    with pytest.raises(ConfigError):
        documents.rollback_of(history(*[ALLOW_ALL, FORBID_BIG][:versions]), to, by="c", reason=None, now=NOW)


def test_a_text_is_parsed_once_per_process() -> None:
    assert documents.parse(FORBID_BIG) is documents.parse(FORBID_BIG)
    assert documents.cached(documents.digest(FORBID_BIG)) is documents.parse(FORBID_BIG)


NOTHING_SWITCHED: list[object] = [{}, {}, {}, {}]  # nothing frozen, revoked or switched off; no limit


def _replies(index: dict[bytes, bytes]) -> list[object]:
    return [set(), None, {}, *NOTHING_SWITCHED, {b"alice", b"bob"}, b"1000", index, {}]


def test_a_task_is_judged_by_the_version_it_is_stamped_with_and_an_old_stamp_by_the_apps_own() -> None:
    v1, v2 = history(ALLOW_ALL, FORBID_BIG)
    index = {b"1": v1.digest.encode(), b"2": v2.digest.encode()}
    documents._parsed.pop(v2.digest, None)  # as if this process had never read v2
    snap = snapshot_from(_replies(index), "refund", app.shipped_policy)
    assert snap.policy == "policy-refund-v2" and snap.unloaded == (2,)
    assert policy_reads(snap) == [("HMGET", "wk:authority:app:{refund}:policies", "2")]
    snap = with_policies(snap, [[v2.encode()]])
    task = {"task": "t-1", "requester": "alice"}
    big = {"amount": 1500, "approver": "bob"}
    assert authorize("bob", "refund", task, snap, big, stamp="policy-refund-v1").allowed
    assert authorize("bob", "refund", task, snap, big).reason == "no refund above 1200, got 1500"
    # a stamp from before versions: the app's own policy (examples/refund.cedar)
    assert authorize("bob", "refund", task, snap, big, stamp="refund-policy-1").allowed
    assert not authorize("bob", "refund", task, snap, {"amount": 1500}, stamp="refund-policy-1").allowed


def test_an_app_with_no_limit_of_its_own_reads_the_shared_approvers_and_limit() -> None:
    shared: list[object] = [{b"carol"}, b"50", {}, *NOTHING_SWITCHED, set(), None, {}, {}]
    own: list[object] = [{b"carol"}, b"50", {}, *NOTHING_SWITCHED, {b"dave"}, b"70", {}, {}]
    assert (snapshot_from(shared, "refund").approvers, snapshot_from(shared, "refund").limit) == (
        frozenset({"carol"}),
        50,
    )
    assert (snapshot_from(own, "refund").approvers, snapshot_from(own, "refund").limit) == (
        frozenset({"dave"}),
        70,
    )


def test_an_app_with_no_policy_at_all_lets_only_its_approvers_approve() -> None:
    snap = Snapshot(approvers=frozenset({"bob"}), limit=0, app="rooms")
    task = {"task": "t-1", "requester": "alice"}
    assert authorize("bob", "approve", task, snap).allowed
    assert authorize("dave", "approve", task, snap).reason == "not an authorised approver"
    assert authorize("alice", "approve", task, snap).reason == "not an authorised approver"
    assert authorize("bob", "book", task, snap).allowed


def _ready(amount: int, policy: str, approved: bool, limit: int) -> Checkpoint:
    """A refund task ready to run (approved, or created under `limit`), stamped with `policy`."""
    made = refund.create(
        "t-1",
        "svc",
        "default",
        {"amount": amount, "currency": "EUR"},
        auth=replace(OPEN, limit=limit),
        now=NOW,
    )
    assert isinstance(made, Checkpoint)
    if approved:
        made = refund.approve(made, "alice", 1, OPEN, NOW)
        assert isinstance(made, Checkpoint)
    stamps = made.versions.model_copy(update={"policy": policy})
    return made.model_copy(update={"versions": stamps})


def _proposed(cp: Checkpoint, auth: Snapshot) -> object:
    args = {"task_id": cp.task_id, "amount": cp.business.data["amount"], "currency": "EUR"}
    return effects.check_proposal(app, cp, "refund", args, auth=auth, now=NOW)


OPEN = Snapshot(approvers=frozenset({"alice", "bob"}), limit=1000)


@pytest.mark.parametrize(
    ("amount", "approved", "limit", "stamped", "refused"),
    [
        (2500, True, 1000, "policy-refund-v2", "no refund above 1200, got 2500"),
        (2500, True, 1000, "policy-refund-v1", None),  # pinned: its own version's text
        (2500, True, 1000, "refund-policy-1", None),  # stamped before versions: the app's own text
        (2500, False, 5000, "policy-refund-v2", "no refund above 1200, got 2500"),
        (2500, False, 5000, "policy-refund-v1", None),
        (1100, True, 1000, "policy-refund-v2", None),
    ],
)
def test_gate_7_judges_a_tool_by_the_policy_version_its_task_is_stamped_with(
    amount: int, approved: bool, limit: int, stamped: str, refused: str | None
) -> None:
    v1, v2 = history(str(app.policy), str(app.policy) + FORBID_BIG.removeprefix(ALLOW_ALL))
    parsed = {v.stamp: documents.parse(v.text) for v in (v1, v2)}
    auth = replace(
        OPEN, limit=limit, app="refund", shipped=app.shipped_policy, policies=parsed, policy=v2.stamp
    )
    out = _proposed(_ready(amount, stamped, approved, 0 if approved else limit), auth)
    if refused is None:
        assert isinstance(out, Effect), out
    else:
        assert isinstance(out, Review) and out.reason == refused, out


def test_a_version_the_index_names_but_the_store_lacks_refuses_instead_of_judging_by_another_text() -> None:
    v1, v2 = history(ALLOW_ALL, FORBID_BIG + "// never parsed before\n")
    index = {b"1": v1.digest.encode(), b"2": v2.digest.encode()}
    documents._parsed.pop(v2.digest, None)  # as if this process had never read v2
    snap = with_policies(snapshot_from(_replies(index), "refund", app.shipped_policy), [[None]])
    decision = authorize("bob", "refund", {"task": "t-1"}, snap, {"amount": 5}, stamp="policy-refund-v2")
    assert decision.reason == "policy policy-refund-v2 is named by the app's index but could not be read"
    assert authorize("bob", "refund", {"task": "t-1"}, snap, {"amount": 5}, stamp="policy-refund-v1").allowed


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (
            'permit (principal, action == Action::"refnd", resource);',
            'line 1: unrecognized action `Action::"refnd"`',
        ),
        (
            ALLOW_ALL + 'forbid (principal, action, resource) when { resource.colour == "x" };',
            "line 2: attribute `colour` on entity type `Task` not found",
        ),
        ("forbid (principal, action, resource) when { context.amount > 2 };", "optional attribute `amount`"),
        (
            'forbid (principal, action, resource) when { resource has amount && resource.amount == "x" };',
            "line 1",
        ),
    ],
)
def test_a_deploy_names_what_the_app_does_not_have_and_stores_nothing(text: str, named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        documents.new_version("refund", [], text, by="alice", reason="", now=NOW, check=app.check_policy)
    assert named in str(caught.value)


def test_the_bundled_policies_hold_to_their_apps_and_a_wrong_one_stops_the_app_at_load() -> None:
    from wakeful.examples.onboarding import app as onboarding

    assert app.check_policy(str(app.policy)) == [] and onboarding.check_policy(str(onboarding.policy)) == []
    with pytest.raises(ConfigError, match='its policy: line 1: unrecognized action `Action::"refnd"`'):
        App(
            name="refund",
            workflows=app.workflows,
            tools=app.tools,
            policy='permit (principal, action == Action::"refnd", resource);',
        )
