"""The partition a key lands on is the Java client's (murmur2), computed without loading a second
Kafka client library into every role (core/murmur2.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as reference

from wakeful.consumers.kafka.client import partition_of
from wakeful.core.murmur2 import murmur2

# The Java client's own values (org.apache.kafka.common.utils.UtilsTest), as unsigned ints.
JAVA = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536}


@pytest.mark.parametrize(("data", "signed"), JAVA.items())
def test_murmur2_is_the_java_clients_hash(data: bytes, signed: int) -> None:
    assert murmur2(data) == signed & 0xFFFFFFFF


@given(st.binary(max_size=64))
def test_murmur2_matches_kafka_pythons_for_any_bytes(data: bytes) -> None:
    assert murmur2(data) & 0x7FFFFFFF == reference(data) & 0x7FFFFFFF


@given(st.text(max_size=40), st.integers(1, 64))
def test_a_key_lands_where_the_java_partitioner_puts_it(key: str, partitions: int) -> None:
    assert partition_of(key, partitions) == (reference(key.encode()) & 0x7FFFFFFF) % partitions


def test_no_role_loads_kafka_python() -> None:
    """A role process starts in well under a second; kafka-python alone would add about 0.1 s to
    each, and the publisher that needs it loads it when it is made."""
    roles = ("gate", "inbound", "relay", "executor", "proposer", "timer", "ingress")
    code = "import sys, wakeful.cli.main\n" + "".join(f"import wakeful.consumers.{r}.main\n" for r in roles)
    code += "print(sorted(m for m in sys.modules if m == 'kafka' or m.startswith('kafka.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
