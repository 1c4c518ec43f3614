"""The minter's Kafka lane (consumers/minter/kafka_lane.py) as pure logic, with a provider that
stands in for the broker: answers come back in order with their connection, a mint that fails is
answered with why, one the step stopped waiting for is never made, and stopping drops the queued
mints, runs the ends and expires what is left."""

from __future__ import annotations

import select
import threading
import time
from typing import Any, cast

from wakeful.consumers.minter.kafka_lane import KafkaLane
from wakeful.consumers.minter.kafka_provider import KafkaProvider
from wakeful.core.grants import Grant
from wakeful.core.minting import TIMEOUT_S


class Broker:
    """The provider's face the lane uses, with no broker behind it."""

    def __init__(self) -> None:
        self.hmacs: dict[str, str] = {}
        self.ended: list[str] = []
        self.closed = False

    def end(self, token_ids: list[str]) -> list[str]:
        self.ended += token_ids
        return [t for t in token_ids if self.hmacs.pop(t, None) is not None]

    def revoked(self, client: Any) -> list[str]:
        return []

    def close(self) -> None:
        self.closed = True


def grant(n: int) -> Grant:
    return Grant("notices", "announce", f"t-{n}", f"ANNOUNCE:t-{n}:v1", 7, True)


def answers(lane: KafkaLane, count: int, deadline_s: float = 10.0) -> list[tuple[Any, dict[str, object]]]:
    found: list[tuple[Any, dict[str, object]]] = []
    end = time.monotonic() + deadline_s
    while len(found) < count and time.monotonic() < end:
        select.select([lane.wake], [], [], 0.5)  # woken when one is ready
        found += lane.answered()
    return found


def test_answers_come_back_in_order_with_their_connection_and_a_failed_mint_says_why() -> None:
    def mint(asked: Grant) -> dict[str, object]:
        if asked.task_id == "t-1":
            raise RuntimeError("the broker said no")
        return {"ok": True, "user": f"tok-{asked.task_id}"}

    lane = KafkaLane(cast(KafkaProvider, Broker()), mint, None)
    for n in (1, 2, 3):
        lane.mint(grant(n), f"peer-{n}")
    got = answers(lane, 3)
    assert [peer for peer, _ in got] == ["peer-1", "peer-2", "peer-3"]
    assert got[0][1]["ok"] is False and "the broker said no" in str(got[0][1]["error"])
    assert [said["user"] for _, said in got[1:]] == ["tok-t-2", "tok-t-3"]
    assert lane.stop()


def test_a_mint_the_step_stopped_waiting_for_is_never_made() -> None:
    made: list[Grant] = []

    def mint(asked: Grant) -> dict[str, object]:
        made.append(asked)
        return {"ok": True}

    lane = KafkaLane(cast(KafkaProvider, Broker()), mint, None)
    lane.mint(grant(1), "late", asked_at=time.monotonic() - TIMEOUT_S - 1)
    [(peer, said)] = answers(lane, 1)
    assert peer == "late" and said["ok"] is False and "not made" in str(said["error"])
    assert made == []
    assert lane.stop()


def test_stopping_drops_the_queued_mints_runs_the_ends_and_expires_what_is_left() -> None:
    broker, entered, held, made = Broker(), threading.Event(), threading.Event(), []

    def slow(asked: Grant) -> dict[str, object]:  # the first mint waits on the broker
        entered.set()
        held.wait(10)
        made.append(asked)
        broker.hmacs[f"tok-{asked.task_id}"] = "secret"
        return {"ok": True, "user": f"tok-{asked.task_id}"}

    lane = KafkaLane(cast(KafkaProvider, broker), slow, None)
    lane.mint(grant(1), "first")
    lane.mint(grant(2), "queued")
    lane.end(["tok-old"])
    assert entered.wait(10)  # the first is with the broker when the stop comes
    stopping = threading.Thread(target=lane.stop)
    stopping.start()
    deadline = time.monotonic() + 10
    while not lane.stopping and time.monotonic() < deadline:  # under way before the broker answers
        time.sleep(0.01)
    held.set()
    stopping.join(10)
    got = dict(answers(lane, 2))
    assert got["first"]["ok"] is True and got["queued"] == {"ok": False, "error": "the minter is stopping"}
    assert [g.task_id for g in made] == ["t-1"]  # the queued one was never made
    assert broker.ended == ["tok-old"] and broker.closed  # the end ran; what was left, expired
