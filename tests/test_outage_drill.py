"""An outage of many times the max age loses nothing (D84, D85): `wakeful chaos --outage` takes
inbound, then the gate, then every role at once down for three times WAKEFUL_EVENT_MAX_AGE while
300 tasks' creates and approvals arrive through the HTTP door and straight to Kafka, brings them
back, and finds every event applied once, nothing dead-lettered, no effect twice and no task
stranded. Redis or the broker down for as long as that loses nothing either: the door answers 503
and its senders try again (a second copy that lands is refused as a repeat, counted apart)."""

from __future__ import annotations

import os

import pytest
from helpers import CHAOS_S, chaos_report

from wakeful.core.settings import Settings

# Short, so that three times it is a short outage; still several times what a send takes from its
# signing to the door's judgement or the broker's append (a second or so on a busy box: one the door
# refused as stale would fail the drill), so only the outage ages an event.
MAX_AGE_S = 6
OUTAGE = f"{3 * MAX_AGE_S}s"


@pytest.mark.timeout(CHAOS_S + 60)
@pytest.mark.parametrize(("targets", "tasks"), [("inbound", 300), ("gate", 300), ("all", 300), ("redis", 60)])
def test_an_outage_three_times_the_max_age_dead_letters_loses_and_strands_nothing(
    targets: str, tasks: int, settings: Settings, kafka_bootstrap: str, redis_url: str
) -> None:
    env = {**os.environ, "WAKEFUL_EVENT_MAX_AGE": str(MAX_AGE_S)}
    report = chaos_report(
        "--outage", targets, "--for", OUTAGE, "--tasks", str(tasks), "--seed", "11", env=env
    )
    assert report["ok"], report
    assert (report["dead_lettered"], report["lost"], report["duplicated"], report["stranded"]) == (0, 0, 0, 0)
    assert report["stages"] == {"closed": tasks} and report["off_plan"] == 0, report
    assert 0 < report["sent_through_door"] < tasks  # both roads were taken


@pytest.mark.timeout(CHAOS_S + 60)
def test_a_broker_outage_loses_nothing_its_senders_got_onto_kafka(
    settings: Settings, kafka_bootstrap: str, redis_url: str
) -> None:
    """While the broker is away nothing reaches Kafka: the door answers 503 and a publisher waits.
    An event is judged by when it reached Kafka, so a sender still within its max age then (120 s
    here) loses nothing; a second copy of an event sent again is refused as a repeat, counted apart."""
    env = {**os.environ, "WAKEFUL_EVENT_MAX_AGE": "120"}
    report = chaos_report("--outage", "kafka", "--for", OUTAGE, "--tasks", "40", "--seed", "11", env=env)
    assert report["ok"], report
    assert (report["dead_lettered"], report["lost"], report["duplicated"], report["stranded"]) == (0, 0, 0, 0)
    assert report["stages"] == {"closed": 40}, report
