"""A pinned batch goes on the wire exactly as redis-py would have packed it: the same RESP bytes for
every command wakeful sends (names of one word; str, bytes and int arguments, any content)."""

from __future__ import annotations

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from redis.connection import Connection

from wakeful.state.pinned import Command, pack

NAMES = st.sampled_from(["GET", "SET", "WATCH", "XADD", "FCALL", "SISMEMBER", "HGETALL", "MULTI", "EXEC"])
ARGS = st.lists(st.one_of(st.text(), st.binary(), st.integers(-(2**63), 2**63 - 1)), max_size=8)
COMMANDS = st.lists(st.tuples(NAMES, ARGS).map(lambda c: (c[0], *c[1])), min_size=1, max_size=20)


@given(COMMANDS)
def test_a_batch_is_packed_byte_for_byte_as_redis_py_packs_it(commands: list[Command]) -> None:
    assert pack(commands) == b"".join(Connection().pack_commands(commands))  # type: ignore[no-untyped-call]


def test_an_argument_redis_cannot_carry_is_refused_as_redis_py_refuses_it() -> None:
    with pytest.raises(redis.DataError):
        pack([("SET", "k", None)])  # type: ignore[list-item]
