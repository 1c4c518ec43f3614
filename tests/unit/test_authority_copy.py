"""The sealed copy of authority on wakeful.authority (authority/backup.py): it opens only with the
keyring that sealed it, a copy edited on the topic is refused, and a copy whose keys disagree with
its digest is refused too."""

from __future__ import annotations

import orjson
import pytest

from wakeful.authority import backup
from wakeful.core.errors import DecodeError, TamperedState
from wakeful.state.seal import Keyring, Sealer

pytestmark = pytest.mark.timeout(30)

SEALER = Sealer(Keyring.generate())
FOUND = {"wk:authority:limit": {"type": "string", "value": "MTAwMA=="}}


def test_a_copy_opens_with_the_keyring_that_sealed_it() -> None:
    at, found = backup.unseal(SEALER, backup.seal(SEALER, FOUND, 1_700_000_000_000))
    assert (at, found) == (1_700_000_000_000, FOUND)


def test_an_edited_copy_or_another_keyring_is_refused() -> None:
    blob = bytearray(backup.seal(SEALER, FOUND, 1))
    blob[-3] ^= 1
    with pytest.raises(TamperedState):
        backup.unseal(SEALER, bytes(blob))
    with pytest.raises(TamperedState):
        backup.unseal(Sealer(Keyring.generate()), backup.seal(SEALER, FOUND, 1))


def test_a_copy_whose_keys_disagree_with_its_digest_is_refused() -> None:
    plain = orjson.dumps({"schema_version": 1, "at_ms": 1, "digest": backup.digest({}), "keys": FOUND})
    with pytest.raises(DecodeError):
        backup.unseal(SEALER, SEALER.seal(backup.SEALED_AS, 1, backup.SCHEMA, plain))
