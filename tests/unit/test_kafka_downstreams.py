"""Kafka downstreams and their tokens (D123), without servers: what a declaration may name, the
rights its owner and the minter get, which recorded names are tokens, and the broker's token key."""

from __future__ import annotations

import pytest

from wakeful.core.kafka_downstream import KafkaDownstream, owner_of
from wakeful.devstack import kafka_props
from wakeful.examples.downstreams import NOTICES
from wakeful.operate import token_rights
from wakeful.operate.kafka_acl import owner_acls
from wakeful.state import downstreams, minted

NOTES = KafkaDownstream("notes", writes=("ex.notes",))


@pytest.mark.parametrize(
    ("declared", "wrong"),
    [
        (NOTES, None),
        (KafkaDownstream("Notes", writes=("ex.notes",)), "lowercase"),
        (KafkaDownstream("bank", writes=("ex.notes",)), "a name of its own"),
        (KafkaDownstream("notes", writes=()), "one or more topics"),
        (KafkaDownstream("notes", writes=("wakeful.events",)), "outside wakeful's"),
        (KafkaDownstream("notes", writes=("ex notes",)), "one or more topics"),
    ],
)
def test_a_kafka_downstream_names_itself_apart_and_writes_only_topics_of_its_own(
    declared: KafkaDownstream, wrong: str | None
) -> None:
    found = declared.problems(frozenset({"bank"}))
    assert (found == []) if wrong is None else any(wrong in p for p in found), found


def test_the_owner_may_write_its_topics_alone_and_the_minter_may_make_its_tokens_alone() -> None:
    assert [str(a) for a in owner_acls((NOTES,))] == ["allow User:wakeful-dt-notes WRITE on topic ex.notes"]
    [rule] = token_rights.wanted([NOTES.owner])
    assert rule.principal == "User:wakeful-minter"
    assert rule.resource_pattern.resource_name == "User:wakeful-dt-notes"  # named by the whole principal
    assert rule.operation.name == "CREATE_TOKENS"


def test_the_example_kafka_downstream_is_loaded_apart_from_the_redis_ones() -> None:
    spec = "wakeful.examples.downstreams:DOWNSTREAMS"
    assert downstreams.kafka(spec) == (NOTICES,)
    assert NOTICES.name not in {d.user for d in downstreams.load(spec)}
    assert owner_of("notices") == NOTICES.owner == "wakeful-dt-notices"


def test_only_a_token_id_among_recorded_names_is_a_token() -> None:
    names = ["wkc-" + "a" * 24, "yHPPLmdASoKfEZFqbKWiHA", "no spaces allowed", "x"]
    assert minted.tokens_among(names) == ["yHPPLmdASoKfEZFqbKWiHA"]


def test_the_brokers_token_key_follows_the_admin_password_and_is_never_it() -> None:
    one, again, other = (
        dict(line.split("=", 1) for line in kafka_props.tokens(pw)) for pw in ("a", "a", "b")
    )
    key = "delegation.token.secret.key"
    assert one[key] == again[key] != other[key] and one[key] != "a"
