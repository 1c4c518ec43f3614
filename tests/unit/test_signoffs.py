"""Two owners sign every release (D121): the rules of authority/signoffs.py and the release digest."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from wakeful.authority import signoffs
from wakeful.authority.revocations import Revocation
from wakeful.authority.signoffs import SignOff
from wakeful.authority.snapshot import Snapshot
from wakeful.core.errors import ConfigError
from wakeful.producers.signing import Ed25519Signer
from wakeful.schemas.events import APPROVE, SIGNOFF
from wakeful.schemas.signatures import VerifyKey
from wakeful.sdk.app import load_app
from wakeful.workflow import release_digest

pytestmark = pytest.mark.unit

APP, DIGEST, NOW = "refund", "d" * 64, datetime(2026, 12, 7, tzinfo=UTC)
OWNERS = {"business": ("dana", "sam"), "security": ("sam", "sec")}
KEYS = {p: Ed25519Signer(f"key-{p}", Ed25519PrivateKey.generate()) for p in ("dana", "sam", "sec", "eve")}
REGISTRY = {
    s.key_id: VerifyKey(
        s.key_id, "ed25519", s.private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw), p
    )
    for p, s in KEYS.items()
}
AUTH = Snapshot(
    approvers=frozenset(),
    limit=0,
    signers=REGISTRY,
    signer_kinds=dict.fromkeys(REGISTRY, frozenset({SIGNOFF})),
)
SEC_REVOKED = dataclasses.replace(
    AUTH, revoked={"default/sec": Revocation("sec", "key-sec", "ops", "lost", "now")}
)


def signed(principal: str, role: str, digest: str = DIGEST, key: str | None = None) -> SignOff:
    return signoffs.sign(KEYS[key or principal], APP, digest, role=role, principal=principal, now=NOW)


@pytest.mark.parametrize(
    ("held", "deploys"),
    [
        ([], False),
        ([signed("dana", "business")], False),  # one sign-off
        ([signed("sam", "business"), signed("sam", "security")], False),  # two, one principal
        ([signed("dana", "business"), signed("sec", "security")], True),
        ([signed("sam", "business"), signed("sam", "security"), signed("dana", "business")], True),  # matched
        ([signed("dana", "business"), signed("sec", "security", digest="e" * 64)], False),  # another release
        ([signed("dana", "business"), signed("eve", "security")], False),  # eve holds no role
        ([signed("dana", "business"), signed("sec", "security", key="eve")], False),  # not sec's key
    ],
)
def test_a_release_deploys_only_with_each_owner_role_signed_by_a_principal_of_its_own(
    held: list[SignOff], deploys: bool
) -> None:
    found = signoffs.problems(APP, DIGEST, OWNERS, held, AUTH)
    assert (found == []) is deploys, found


def test_a_signoff_counts_for_nothing_once_altered_or_its_key_revoked() -> None:
    good = signed("sec", "security")
    assert signoffs.invalid(good, OWNERS, AUTH) is None
    for altered in (
        dataclasses.replace(good, digest="e" * 64),
        dataclasses.replace(good, role="business"),
        dataclasses.replace(good, signed_at="2027-01-01T00:00:00+00:00"),
        dataclasses.replace(good, signature="AAAA"),
        dataclasses.replace(good, signature="not base64!"),
    ):
        assert signoffs.invalid(altered, OWNERS, AUTH) is not None, altered
    assert "revoked" in (signoffs.invalid(good, OWNERS, SEC_REVOKED) or "")
    approvals_only = dataclasses.replace(AUTH, signer_kinds={"key-sec": frozenset({APPROVE})})
    assert "registered for release.signoff" in (signoffs.invalid(good, OWNERS, approvals_only) or "")
    missing = signoffs.problems(APP, DIGEST, OWNERS, [signed("dana", "business")], SEC_REVOKED)
    assert missing == ["role 'security' has not signed release dddddddddddd"]


def test_a_stored_signoff_that_is_not_one_is_read_as_a_reason() -> None:
    for raw in (b"\xff", b"[1]", b'{"app": "a"}', b'{"nope": 1}'):
        assert isinstance(signoffs.decode(raw), str), raw
    good = signed("dana", "business")
    assert signoffs.decode(good.encode()) == good


def test_the_release_digest_is_stable_and_changes_with_wording_owners_and_code() -> None:
    app = load_app("wakeful.examples.refund:app")
    digest = release_digest.digest(app)
    assert digest == release_digest.digest(app) and len(digest) == 64
    assert "wakeful.examples.refund" in release_digest.parts(app)["code"]
    owned = dataclasses.replace(app, owners={"business": ["dana"], "security": ["sec"]})
    assert release_digest.digest(owned) != digest
    tool = app.tools[0]
    reworded = type(tool.__class__.__name__, (tool.__class__,), {"description": "Another text."})()
    assert release_digest.digest(dataclasses.replace(app, tools=[reworded, *app.tools[1:]])) != digest


def test_owners_name_two_roles_each_with_principals() -> None:
    app = load_app("wakeful.examples.refund:app")
    for bad in (
        {"business": ["dana"]},
        {"business": "dana", "security": ["sec"]},
        {"Bad Role": ["a"], "x": ["b"]},
    ):
        with pytest.raises(ConfigError, match="owner"):
            dataclasses.replace(app, owners=bad)


def test_the_release_check_names_what_a_release_changes_against_the_one_deployed_last() -> None:
    app = load_app("wakeful.examples.refund:app")
    before = release_digest.parts(app)
    assert release_digest.changes(before, before) == []
    assert release_digest.changes(None, before)[0].startswith("no release was deployed")
    after = json_copy(before)
    after["tools"]["refund"] = {"credential": "shop", "egress": ["bank", "shop"]}
    after["workflows"].append("refund@2")
    after["code"]["wakeful.examples.refund"] = "0" * 64
    said = release_digest.changes(before, after)
    assert "workflow refund@2 added" in said and "code wakeful.examples.refund: changed" in said
    assert "tool refund: scope bank -> shop" in said
    assert "tool refund: egress ['bank'] -> ['bank', 'shop']" in said


def json_copy(doc: dict[str, object]) -> dict[str, Any]:
    import orjson

    copied: dict[str, Any] = orjson.loads(orjson.dumps(doc))
    return copied
