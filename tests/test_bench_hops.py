"""`wakeful dev bench-hops`: the bare chain of hops carries every task it sends, counts each of its
processes, and leaves no topic, group or key of its own behind."""

from __future__ import annotations

from cli_run import doc, wakeful
from confluent_kafka.admin import AdminClient
from helpers import kafka_as

from wakeful.core import process
from wakeful.core.settings import Settings
from wakeful.state import acl


def test_bench_hops_carries_every_task_through_the_chain_and_leaves_nothing_behind(
    settings: Settings, kafka_bootstrap: str, redis_url: str
) -> None:
    ran = wakeful(
        "dev", "bench-hops", "--hops", "2", "--trips", "2", "--tasks", "300", "--rate", "200", "--json"
    )
    assert ran.returncode == 0, ran.stderr
    found = doc(ran)
    assert (found["hops"], found["redis_trips_per_hop"], found["tasks"]) == (2, 2, 300)
    assert set(found["cpu_ms_per_task"]) == {"hop0", "hop1"}
    assert all(ms > 0 for ms in found["cpu_ms_per_task"].values())
    box = found["box_cpu_ms_per_task"]
    assert box["roles"] == round(sum(found["cpu_ms_per_task"].values()), 2)
    assert box["total"] >= box["roles"] and 0 < found["latency_ms"]["p50"] <= found["latency_ms"]["p99"]

    made = set(found["topics"])
    assert len(made) == 2
    admin = AdminClient(kafka_as(kafka_bootstrap))

    def gone() -> bool:
        topics = set(admin.list_topics(timeout=10).topics)
        groups = {g.group_id for g in admin.list_consumer_groups(request_timeout=10).result().valid}
        return not made & topics and not {f"wk-bench-hops-{t}" for t in made} & groups

    assert process.wait_until(gone, 30), "the chain's scratch topics or groups are still there"
    redis = acl.connect(settings, "admin")
    trips = list(redis.scan_iter("wk:bench:hops:*", count=1000))
    assert trips, "the chain made no Redis round trips"
    assert all(redis.pttl(key) != -1 for key in trips), "a round trip's key would stay for ever"
