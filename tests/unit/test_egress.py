"""Where a tool may reach (core/egress.py, D116): a declared endpoint admits exactly its host and
ports; a name reaches what the deployment maps it to and nothing if unmapped; a malformed map names
every problem at once; a wildcard admits names under its suffix, never the suffix or a lookalike."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wakeful.core.egress import Allowed, Endpoint, endpoint, parse_map, resolve, unmapped
from wakeful.core.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "made"),
    [
        ("api.bank.example:443", Endpoint("api.bank.example", 443, 443)),
        ("10.0.0.5:7000-7005", Endpoint("10.0.0.5", 7000, 7005)),
        ("[::1]:8080", Endpoint("::1", 8080, 8080)),
        ("*.bank.example:443", Endpoint("*.bank.example", 443, 443)),
        ("unix:/run/bank.sock", Endpoint("unix", path="/run/bank.sock")),
        ("bank", None),
        ("bank:", None),
        ("bank:0", None),
        ("bank:70000", None),
        ("bank:9-1", None),
        ("[nothost]:80", None),
        ("a b:80", None),
    ],
)
def test_an_entry_is_an_endpoint_only_when_written_as_one(text: str, made: Endpoint | None) -> None:
    assert endpoint(text) == made


@pytest.mark.parametrize(
    ("entry", "host", "port", "permitted"),
    [
        ("api.bank.example:443", "api.bank.example", 443, True),
        ("api.bank.example:443", "API.Bank.Example.", 443, True),
        ("api.bank.example:443", "api.bank.example", 80, False),
        ("api.bank.example:443", "evil.example", 443, False),
        ("api.bank.example:443", "api.bank.example.evil.example", 443, False),
        ("api.bank.example:443", "api.bank.example", None, True),  # a look-up: its connect is checked
        ("*.bank.example:443", "pay.bank.example", 443, True),
        ("*.bank.example:443", "bank.example", 443, False),
        ("*.bank.example:443", "evilbank.example", 443, False),
        ("10.0.0.5:7000-7005", "10.0.0.5", 7003, True),
        ("10.0.0.5:7000-7005", "10.0.0.5", 7006, False),
        ("127.0.0.1:6379", "::ffff:127.0.0.1", 6379, True),
        ("[::1]:80", "0:0::1", 80, True),
        ("unix:/run/bank.sock", "unix", 0, False),
    ],
)
def test_an_endpoint_admits_its_host_and_ports_and_nothing_else(
    entry: str, host: str, port: int | None, permitted: bool
) -> None:
    allowed = resolve("t", [entry], {})
    assert allowed.permits(host, port) is permitted


def test_a_name_reaches_what_the_map_says_and_an_unmapped_one_reaches_nothing() -> None:
    table = parse_map("bank=10.0.0.5:6379,10.0.0.6:6379; shop=api.shop.example:443")
    allowed = resolve("refund", ["bank", "rooms"], table)
    assert allowed.permits("10.0.0.6", 6379)
    assert not allowed.permits("api.shop.example", 443)
    assert unmapped(["bank", "rooms", "x.example:443"], table) == ["rooms"]
    assert resolve("book", ["rooms"], table).endpoints == ()


def test_a_name_mapped_twice_reaches_both() -> None:
    table = parse_map("bank=10.0.0.5:6379;bank=10.0.0.7:6379")
    assert resolve("t", ["bank"], table).permits("10.0.0.7", 6379)


def test_a_malformed_map_names_every_problem_at_once() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_map("bank=10.0.0.5;Shop=x:1;nothing;ok=h:1,h:99999")
    said = str(raised.value)
    assert "WAKEFUL_EGRESS" in said
    for problem in ("'10.0.0.5'", "'Shop=x:1'", "'nothing'", "'h:99999'"):
        assert problem in said, said


def test_a_unix_socket_is_admitted_by_its_path_only() -> None:
    allowed = resolve("t", ["unix:/run/a.sock"], {})
    assert allowed.permits_path("/run/a.sock")
    assert not allowed.permits_path("/run/b.sock")
    assert not Allowed("t").permits_path("/run/a.sock")


def test_a_refusal_names_the_tool_what_it_tried_and_what_it_declared() -> None:
    said = resolve("fetch_page", ["pages"], {}).refusal("evil.example:25")
    assert said == "egress refused: fetch_page tried evil.example:25, outside its declared egress (pages)"


labels = st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True)


@given(st.lists(labels, min_size=1, max_size=4), st.lists(labels, min_size=1, max_size=4))
def test_a_wildcard_admits_a_name_only_under_its_own_suffix(suffix: list[str], asked: list[str]) -> None:
    domain = ".".join(suffix)
    allowed = resolve("t", [f"*.{domain}:443"], {})
    host = ".".join(asked)
    assert allowed.permits(host, 443) is (host.endswith("." + domain))
