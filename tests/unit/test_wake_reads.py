"""A wake's round trip reads by name: each read's reply is found under its own name whichever
optional reads (the event's, its action log, an operator's replay) the batch carries."""

from __future__ import annotations

from itertools import product
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from wakeful.consumers.gate import reads as wake_reads
from wakeful.consumers.gate import rules as gate_rules
from wakeful.producers.signing import Ed25519Signer, sign_event
from wakeful.schemas import events
from wakeful.schemas.events import SignedEvent
from wakeful.state.replies import named

SIGNER = Ed25519Signer("key-alice", Ed25519PrivateKey.generate())
REPLAYER = Ed25519Signer("key-ops", Ed25519PrivateKey.generate())
WITH_LOG = events.AMEND  # the gate reads the action log for it (gate_rules.needs_started)
WITHOUT_LOG = events.CREATE


def event(kind: str) -> SignedEvent:
    return sign_event(SIGNER, kind, {}, task_id="t-1")


def answer(reads: wake_reads.Asked) -> list[Any]:
    """A stand-in for the batch: each read's reply says which command it answers."""
    return [f"reply to {command[0]!r} {command[-1]!r}" for _, command in reads]


CASES = [
    pytest.param(ev, replay, id=f"{name}-{'replay' if replay else 'no replay'}")
    for (name, ev), replay in product(
        [("deadline", None), ("log", event(WITH_LOG)), ("no log", event(WITHOUT_LOG))],
        [None, sign_event(REPLAYER, events.REPLAY, {}, task_id="t-1")],
    )
]


@pytest.mark.parametrize(("ev", "replay"), CASES)
def test_an_optional_read_added_or_left_out_shifts_no_other_reads_reply(
    ev: SignedEvent | None, replay: SignedEvent | None
) -> None:
    asked = wake_reads.asked("t-1", ev, replay)
    got = wake_reads.got(asked, answer(asked))
    alone = {name: answer([(name, command)])[0] for name, command in asked}
    for name in ("evidence", "held", "signer", "receipt", "ops", "replay_signer"):
        assert getattr(got, name) == alone.get(name), name  # its own reply, or None if not asked
    assert (got.signer is None) is (ev is None)
    assert (got.ops is None) is (ev is None or not gate_rules.needs_started(ev.kind))
    assert (got.replay_signer is None) is (ev is None or replay is None)


def test_a_batch_answered_short_or_asking_one_name_twice_is_refused_not_misread() -> None:
    asked = wake_reads.asked("t-1", event(WITH_LOG), None)
    with pytest.raises(ValueError, match="replies"):
        wake_reads.got(asked, answer(asked)[:-1])
    with pytest.raises(ValueError, match="two reads by one name"):
        named([("held", ("LLEN", "a")), ("held", ("LLEN", "b"))], [1, 2])
