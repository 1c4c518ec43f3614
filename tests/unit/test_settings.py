"""Configuration is validated once and a bad value names the variable to fix."""

from __future__ import annotations

import pytest

from wakeful.core.errors import ConfigError
from wakeful.core.settings import Settings


def test_defaults_point_at_the_local_stack() -> None:
    s = Settings.from_env({"HOME": "/tmp"})
    assert s.kafka_bootstrap == "127.0.0.1:19092"
    assert s.redis_url == "redis://127.0.0.1:16379/0"
    assert s.runs_local_kafka and s.runs_local_redis


def test_external_servers_mean_nothing_local() -> None:
    s = Settings.from_env(
        {"WAKEFUL_KAFKA_BOOTSTRAP": "k1:9092,k2:9092", "WAKEFUL_REDIS_URL": "redis://r:6379/0"}
    )
    assert not s.runs_local_kafka and not s.runs_local_redis
    assert s.kafka_bootstrap == "k1:9092,k2:9092"


def test_a_local_redis_cluster_is_reached_at_its_first_node_and_a_url_names_any_node() -> None:
    local = Settings.from_env({"WAKEFUL_REDIS_CLUSTER": "1", "WAKEFUL_REDIS_PORT": "16379"})
    assert local.redis_cluster and local.redis_cluster_ports == (16380, 16381, 16382)
    assert local.redis_url == "redis://127.0.0.1:16380/0" and local.runs_local_redis
    own = Settings.from_env({"WAKEFUL_REDIS_CLUSTER": "yes", "WAKEFUL_REDIS_URL": "redis://r2:7001/0"})
    assert own.redis_cluster and own.redis_url == "redis://r2:7001/0" and not own.runs_local_redis
    assert not Settings.from_env({}).redis_cluster


def test_a_cluster_of_ones_own_may_use_tls_and_scram_sha_512() -> None:
    s = Settings.from_env(
        {
            "WAKEFUL_KAFKA_BOOTSTRAP": "k1:9093",
            "WAKEFUL_KAFKA_SECURITY": "SASL_SSL",
            "WAKEFUL_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "WAKEFUL_KAFKA_CA": "/etc/ssl/ca.pem",
        }
    )
    assert (s.kafka_security, s.kafka_sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
    assert s.kafka_ca is not None and s.kafka_ca.name == "ca.pem"


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"WAKEFUL_KAFKA_PORT": "abc"}, "WAKEFUL_KAFKA_PORT"),
        ({"WAKEFUL_REDIS_PORT": "70000"}, "WAKEFUL_REDIS_PORT"),
        ({"WAKEFUL_PARTITIONS": "0"}, "WAKEFUL_PARTITIONS"),
        ({"WAKEFUL_KAFKA_HEAP": "lots"}, "WAKEFUL_KAFKA_HEAP"),
        ({"WAKEFUL_KAFKA_BOOTSTRAP": "nohost"}, "WAKEFUL_KAFKA_BOOTSTRAP"),
        ({"WAKEFUL_REDIS_URL": "http://x"}, "WAKEFUL_REDIS_URL"),
        ({"WAKEFUL_KAFKA_PORT": "16379"}, "WAKEFUL_*_PORT"),
        ({"WAKEFUL_REDIS_CREDENTIALS": "/old/redis-credentials.json"}, "WAKEFUL_REDIS_CREDENTIALS"),
        ({"WAKEFUL_KAFKA_SECURITY": "PLAINTEXT"}, "WAKEFUL_KAFKA_SECURITY"),
        # The local broker speaks SASL_PLAINTEXT only; TLS is for a cluster of one's own.
        ({"WAKEFUL_KAFKA_SECURITY": "SASL_SSL"}, "WAKEFUL_KAFKA_SECURITY"),
        ({"WAKEFUL_KAFKA_SASL_MECHANISM": "PLAIN"}, "WAKEFUL_KAFKA_SASL_MECHANISM"),
        ({"WAKEFUL_REDIS_CLUSTER": "maybe"}, "WAKEFUL_REDIS_CLUSTER"),
        # The local cluster's nodes take the three ports after WAKEFUL_REDIS_PORT.
        ({"WAKEFUL_REDIS_CLUSTER": "1", "WAKEFUL_KAFKA_PORT": "16381"}, "WAKEFUL_REDIS_PORT"),
        ({"WAKEFUL_KAFKA_GROUP_PROTOCOL": "cooperative"}, "WAKEFUL_KAFKA_GROUP_PROTOCOL"),
    ],
)
def test_a_bad_setting_is_refused_by_name(env: dict[str, str], setting: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env(env)
    assert info.value.setting == setting
    assert setting in str(info.value)


def test_redis_address_never_shows_credentials() -> None:
    s = Settings.from_env({"WAKEFUL_REDIS_URL": "redis://ops:s3cret@r.example:6380/2"})
    assert s.redis_address == "redis://r.example:6380/2"
    assert "s3cret" not in s.redis_address


def test_a_bad_log_level_is_refused_by_name() -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"WAKEFUL_LOG_LEVEL": "loud"})
    assert info.value.setting == "WAKEFUL_LOG_LEVEL"
    assert Settings.from_env({}).log_level == "warning"
