"""The topics upstream events and wakes travel on carry the broker's append time (D84)."""

from __future__ import annotations

import pytest

from wakeful.core import topics


@pytest.mark.parametrize("name", sorted(topics.APPEND_TIMED))
def test_events_and_wakes_are_stamped_by_the_broker_not_their_producer(name: str) -> None:
    assert topics.config(name)["message.timestamp.type"] == "LogAppendTime"
    assert topics.config(name, events_retention_hours=48)["retention.ms"] == str(48 * 3600 * 1000)


@pytest.mark.parametrize("name", sorted(set(topics.ALL) - topics.APPEND_TIMED))
def test_no_other_topic_is_stamped_or_given_the_events_retention(name: str) -> None:
    config = topics.config(name, events_retention_hours=48)
    assert "message.timestamp.type" not in config
    assert config.get("retention.ms") != str(48 * 3600 * 1000)


def test_the_door_may_read_an_event_for_its_topics_retention_and_one_segment() -> None:
    assert topics.event_keep_s(24) == 24 * 3600 + topics.SEGMENT_S
