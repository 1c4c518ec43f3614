"""A role's consumer config is one librdkafka takes, under either group protocol: built with the
role's own Kafka credential, which `wakeful dev up` writes."""

from __future__ import annotations

import dataclasses

import pytest
from confluent_kafka import Consumer

from wakeful.consumers.consuming import consumer_config
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
