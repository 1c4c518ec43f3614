"""The local broker's settings that size its heap (D81): what it holds for its whole life leaves
its collector room, and the collector is the one the figures chose, on the stack `wakeful dev up`
starts and on the compose stack alike."""

from __future__ import annotations

from pathlib import Path

from wakeful.core.settings import Settings
from wakeful.devstack import kafka, kafka_props


def test_the_log_cleaners_buffer_is_a_small_share_of_the_local_brokers_heap() -> None:
    # The cleaner allocates its whole dedupe buffer on the heap at start and keeps it: at Kafka's
    # default (128 MiB) that was most of the live heap, and the collector marked it over and over.
    props = dict(line.split("=", 1) for line in kafka_props.SINGLE_NODE)
    buffer = int(props["log.cleaner.dedupe.buffer.size"])
    heap = kafka.megabytes(Settings.from_env({}).kafka_heap) * 1024 * 1024  # the default heap
    assert 1024 * 1024 <= buffer <= heap // 16


def test_the_local_broker_starts_with_the_collector_the_figures_chose() -> None:
    flags = kafka.jvm_flags("512m")
    assert "-Xmx512m" in flags and "-Xms256m" in flags
    assert [f for f in flags if f.startswith("-XX:+Use") and f.endswith("GC")] == [kafka.COLLECTOR]


def test_the_compose_broker_runs_the_local_stacks_collector() -> None:
    compose = (Path(__file__).resolve().parents[2] / "compose" / "docker-compose.yml").read_text()
    line = next(ln for ln in compose.splitlines() if "KAFKA_JVM_PERFORMANCE_OPTS:" in ln)
    assert kafka.COLLECTOR in line.split() and "-XX:+UseG1GC" not in line
