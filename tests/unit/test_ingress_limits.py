"""The door's token buckets, on a clock the test moves: a name gets its burst at once, then its rate;
a refused take says how long to wait; a name's allowance is its own; memory stays bounded."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wakeful.consumers.ingress.limits import Buckets, Limit, address, retry_after


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_key_gets_its_burst_at_once_then_its_rate() -> None:
    clock = Clock()
    buckets = Buckets(Limit(rate=2.0, burst=3), clock)
    assert [buckets.take("k") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("k") == pytest.approx(0.5)
    clock.now += 0.5
    assert buckets.take("k") == 0.0
    assert buckets.take("k") > 0


def test_one_keys_allowance_is_not_spent_by_another() -> None:
    buckets = Buckets(Limit(rate=1.0, burst=1), Clock())
    assert buckets.take("a") == 0.0
    assert buckets.take("a") > 0
    assert buckets.take("b") == 0.0


def test_waiting_takes_nothing() -> None:
    buckets = Buckets(Limit(rate=1.0, burst=1), Clock())
    assert buckets.waiting("a") == 0.0
    assert buckets.waiting("a") == 0.0
    assert buckets.take("a") == 0.0
    assert buckets.waiting("a") == pytest.approx(1.0)


def test_the_buckets_keep_at_most_size_names() -> None:
    buckets = Buckets(Limit(rate=1.0, burst=1), Clock(), size=10)
    for i in range(100):
        buckets.take(f"k{i}")
    assert len(buckets._buckets) == 10


@given(st.lists(st.floats(min_value=0, max_value=5), max_size=60))
def test_no_more_than_burst_plus_rate_times_elapsed_is_ever_taken(gaps: list[float]) -> None:
    clock = Clock()
    limit = Limit(rate=3.0, burst=4)
    buckets = Buckets(limit, clock)
    start, taken = clock.now, 0
    for gap in gaps:
        clock.now += gap
        taken += buckets.take("k") == 0.0
    assert taken <= limit.burst + limit.rate * (clock.now - start) + 1e-9


@pytest.mark.parametrize(("wait", "header"), [(0.01, "1"), (1.0, "1"), (1.2, "2"), (30.0, "30")])
def test_retry_after_is_whole_seconds_rounded_up(wait: float, header: str) -> None:
    assert retry_after(wait) == header


def test_a_limit_without_a_rate_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="rate above 0"):
        Limit(rate=0.0, burst=1)


def test_refusals_from_one_ipv6_64_share_one_bucket() -> None:
    # A sender holds a whole /64: were each address its own bucket, it would never run out.
    buckets = Buckets(Limit(rate=1.0, burst=2), Clock())
    sent = [address(f"2001:db8:1:2::{n:x}") for n in range(1, 4)]
    assert [buckets.take(name) for name in sent] == [0.0, 0.0, pytest.approx(1.0)]
    assert buckets.waiting(address("2001:db8:1:2:ffff:ffff:ffff:ffff")) > 0
    assert buckets.waiting(address("2001:db8:1:3::1")) == 0.0  # the next /64 is another sender


def test_a_client_address_is_named_once_whatever_its_spelling() -> None:
    assert address("2001:DB8:1:2:0:0:0:1") == address("2001:db8:1:2::9") == "2001:db8:1:2::/64"
    assert address("::ffff:192.0.2.7") == address("192.0.2.7") == "192.0.2.7"
    assert address("fe80::1%eth0") == "fe80::/64"
    assert address("testclient") == "testclient"


def test_a_delivery_is_recent_for_the_max_age_and_then_forgotten() -> None:
    from wakeful.consumers.ingress.signers import Cached

    clock = Clock()
    recent: Cached[tuple[str, str], bool] = Cached(clock, ttl=300.0, size=3)
    recent.put(("k", "e1"), True)
    assert recent.get(("k", "e1"))[0] and not recent.get(("k2", "e1"))[0]  # another key's id is another event
    clock.now += 301
    assert not recent.get(("k", "e1"))[0]
    for i in range(5):
        recent.put(("k", f"e{i}"), True)
    assert len(recent._read) == 3 and recent.get(("k", "e4"))[0] and not recent.get(("k", "e0"))[0]


def test_the_doors_signer_record_is_read_again_after_its_second() -> None:
    from wakeful.consumers.ingress.signers import Cached

    clock = Clock()
    cached: Cached[str, str | None] = Cached(clock, ttl=1.0, size=2)
    assert cached.get("k") == (False, None)
    cached.put("k", None)  # an unknown key is remembered too: forgeries under one id cost one read
    assert cached.get("k") == (True, None)
    clock.now += 1.0
    assert cached.get("k") == (False, None)  # revoked or registered since: seen within the second
    for name in ("a", "b", "c"):
        cached.put(name, name)
    assert cached.get("a") == (False, None) and cached.get("c") == (True, "c")
