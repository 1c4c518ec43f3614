"""A role's consumer config is one librdkafka takes, under either group protocol: built with the
role's own Kafka credential, which `wakeful dev up` writes. Its producer sends each output at once."""

from __future__ import annotations

import dataclasses

import pytest
from confluent_kafka import Consumer, Producer

from wakeful.consumers.kafka.consuming import consumer_config
from wakeful.consumers.kafka.producing import producer_config
from wakeful.core.settings import GROUP_PROTOCOLS, Settings


@pytest.mark.parametrize("protocol", GROUP_PROTOCOLS)
def test_librdkafka_takes_a_roles_consumer_config_under_either_group_protocol(
    protocol: str, settings: Settings
) -> None:
    """Under KIP-848 librdkafka refuses the classic group knobs at construction: none may be left in."""
    config = consumer_config(dataclasses.replace(settings, kafka_group_protocol=protocol), "gate", "g")
    assert (config.get("group.protocol", "classic"), "group.instance.id" in config) == (
        protocol,
        protocol == "classic" and settings.instance_id is not None,
    )
    Consumer(config).close()


def test_a_roles_producer_sends_each_output_at_once(settings: Settings) -> None:
    """A role flushes after each batch: a linger would batch nothing and add its wait to every hop
    a task crosses (docs/decisions.md D83). The relay lingers, to pack the log's records."""
    config = producer_config(settings, "gate")
    assert config["linger.ms"] == 0
    assert (config["acks"], config["enable.idempotence"]) == ("all", True)
    Producer(config).flush(0)
