"""The ops page's pure login rules (operate/ops/auth.py, operate/ops/sessions.py): whose address a
failed login counts against, and how long a session's record lives. tests/test_ops_sessions.py
attacks the running page with them."""

from __future__ import annotations

import hashlib

import pytest

from wakeful.operate.ops import auth as ops_auth
from wakeful.operate.ops.sessions import Limits, key_of, ttl_ms
from wakeful.state import keys

pytestmark = pytest.mark.timeout(30)

PROXY = ops_auth.trusted_proxies("127.0.0.1, 10.1.0.0/16, ::1")


@pytest.mark.parametrize(
    ("peer", "forwarded", "proxies", "counted"),
    [
        # No proxy configured: the header is the sender's word, whatever it says.
        ("127.0.0.1", "203.0.113.9", (), "127.0.0.1"),
        ("192.0.2.4", "203.0.113.9, 127.0.0.1", (), "192.0.2.4"),
        # A peer that is not a configured proxy: the same.
        ("192.0.2.4", "203.0.113.9", PROXY, "192.0.2.4"),
        # The configured proxy: the address it saw, the right-most one that is no proxy of ours.
        ("127.0.0.1", "203.0.113.9", PROXY, "203.0.113.9"),
        ("127.0.0.1", "198.51.100.1, 203.0.113.9", PROXY, "203.0.113.9"),
        ("127.0.0.1", "203.0.113.9, 10.1.4.4", PROXY, "203.0.113.9"),
        ("::1", "2001:db8::7", PROXY, "2001:db8::7"),
        # Nothing forwarded, or only proxies, or a hop that is no address.
        ("127.0.0.1", None, PROXY, "127.0.0.1"),
        ("127.0.0.1", "", PROXY, "127.0.0.1"),
        ("127.0.0.1", "10.1.0.2, 10.1.0.3", PROXY, "10.1.0.2"),
        ("127.0.0.1", "203.0.113.9, unknown", PROXY, "127.0.0.1"),
        ("127.0.0.1", "not an address", PROXY, "127.0.0.1"),
        (None, "203.0.113.9", PROXY, "?"),
    ],
)
def test_a_login_counts_against_the_peer_unless_a_configured_proxy_forwarded_it(
    peer: str | None, forwarded: str | None, proxies: tuple[ops_auth.Network, ...], counted: str
) -> None:
    assert ops_auth.client_address(peer, forwarded, proxies) == counted


@pytest.mark.parametrize(
    ("text", "count"), [("", 0), (" , ", 0), ("127.0.0.1", 1), ("10.0.0.0/8,::1", 2), ("10.0.0.1/8", 1)]
)
def test_the_trusted_proxies_are_addresses_or_blocks(text: str, count: int) -> None:
    assert len(ops_auth.trusted_proxies(text)) == count


@pytest.mark.parametrize("text", ["proxy.example.com", "127.0.0.1,300.1.1.1", "10.0.0.0/33"])
def test_a_trusted_proxy_that_is_no_address_is_refused_by_name(text: str) -> None:
    with pytest.raises(ValueError, match="is not an IP address or CIDR block"):
        ops_auth.trusted_proxies(text)


@pytest.mark.parametrize(
    ("now", "ends", "idle_s", "ttl"),
    [
        (1000.0, 1000 + 8 * 3600, 1800, 1_800_000),  # idle limit first
        (1000.0, 1060, 1800, 60_000),  # never past the session's end
        (1000.5, 1001, 1800, 500),
        (1000.0, 1000, 1800, 0),  # over
        (2000.0, 1000, 1800, 0),
    ],
)
def test_a_session_record_lives_its_idle_limit_and_never_past_its_end(
    now: float, ends: int, idle_s: int, ttl: int
) -> None:
    assert ttl_ms(now, ends, idle_s) == ttl


def test_a_sessions_key_names_its_nonce_digest_never_the_cookie() -> None:
    session = ops_auth.Session("ops-lead", 2000, "ab" * 16)
    key = key_of(session)
    assert key == keys.ops_session(hashlib.sha256(session.nonce.encode()).hexdigest())
    assert session.nonce not in key and key.startswith("wk:ops:session:")
    with pytest.raises(ValueError, match="session digest"):
        keys.ops_session("wk:{x}:state")


@pytest.mark.parametrize(("idle_s", "max_s"), [(0, 10), (10, 0), (-1, -1)])
def test_session_limits_are_whole_seconds_of_at_least_one(idle_s: int, max_s: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Limits(idle_s, max_s)
