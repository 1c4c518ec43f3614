"""The downstreams an app's tools call (state/downstreams.py) live beside the apps, and the runtime
gives each only what it declares: a Redis user of its own on its own keys, its Lua in the library."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from wakeful.core.errors import ConfigError
from wakeful.core.settings import Settings
from wakeful.examples import bank, suppliers_keys
from wakeful.state import acl, downstreams, library
from wakeful.state.downstreams import Downstream

KEYLESS = "+ping +multi +exec +discard +unwatch +cluster|slots +command"


@pytest.fixture()
def planted() -> Iterator[types.ModuleType]:
    module = types.ModuleType("planted_downstreams")
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]
    downstreams.load.cache_clear()


def test_the_example_downstreams_keep_the_rules_their_users_had_inside_the_runtime() -> None:
    settings = Settings.from_env({})
    assert list(acl.users(settings)) == [*acl.ROLES]  # their users are minted per step: none static (D125)
    users = {d.user: acl.downstream_rules(d) for d in acl.downstreams_of(settings)}
    assert list(users) == ["bank", "suppliers", "shop"]
    assert users["bank"] == (
        f"resetkeys -@all {KEYLESS} +time (~bank:* +get +set +incr +decr +xadd +xrange +fcall)"
    )
    assert users["suppliers"] == (
        f"resetkeys -@all {KEYLESS} +time "
        "(~suppliers:* +get +set +exists +watch +hget +hincrby +xadd +xrange)"
    )
    assert users["shop"] == f"resetkeys -@all {KEYLESS} +time (~shop:* +get +set +watch +xadd +xrange)"


def test_the_library_holds_the_runtime_functions_then_the_downstreams() -> None:
    built = library.of(Settings.from_env({}))
    assert built.functions == (*library.FUNCTIONS, *bank.FUNCTIONS)
    assert library.build().functions == library.FUNCTIONS  # no downstream: the runtime's alone


def test_a_downstream_is_refused_a_roles_name_wakefuls_keys_lua_and_every_problem_is_named_at_once(
    planted: types.ModuleType,
) -> None:
    planted.__dict__["DOWNSTREAMS"] = (
        Downstream("executor", "bank2:*", ("+get",)),  # a role's login
        Downstream("sneaky", "wk:*", ("+eval",)),  # the runtime's keys, Lua of its own
        Downstream("twice", "t:*", ("+get",)),
        Downstream("twice", "t:*", ("+get",)),  # another's name
    )
    with pytest.raises(ConfigError) as refused:
        downstreams.load("planted_downstreams:DOWNSTREAMS", frozenset(acl.ROLES))
    said = str(refused.value)
    assert "WAKEFUL_DOWNSTREAMS" in said
    for problem in ("'executor'", "'wk:*'", "'+eval'", "'twice'"):
        assert problem in said, said


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("no-colon", "is not module:attribute"),
        ("no.such.module:X", "cannot import"),
        ("planted_downstreams:MISSING", "not a tuple of Downstream"),
    ],
)
def test_a_bad_downstreams_setting_says_what_to_fix(planted: types.ModuleType, spec: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        downstreams.load(spec)


def test_the_downstreams_keys_stay_outside_the_runtimes_keyspace() -> None:
    for key in (
        bank.entry_key("REFUND:t-1:v1"),
        bank.LEDGER,
        suppliers_keys.call_key("OP:1"),
        suppliers_keys.LOG,
    ):
        assert not key.startswith("wk:")
    with pytest.raises(ValueError, match="op key"):
        bank.entry_key("a}b")
