"""Per-step credentials, the rules (D120): the minter mints only for a step that is running (the
lease at the grant's fence; an effect's intent in flight for that tool under that op key), only the
scope the tool declares; the store's record never holds a secret; the credential is handed to the
run it was minted for alone, and a result or error that carries it never leaves the run whole."""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import orjson
import pytest
from pydantic import BaseModel

from wakeful.consumers.executor import credentials, guarding
from wakeful.core import grants, minting
from wakeful.core.grants import Grant
from wakeful.core.minting import Credential
from wakeful.sdk import Tool, ToolRefused
from wakeful.state import minted

pytestmark = pytest.mark.unit

TASK, OP = "t-1", "REFUND:t-1:v1"
SCOPES = {"refund": "bank", "peek": "bank"}
LEASE = b"executor-1:7"


def intent(**over: Any) -> bytes:
    entry = {"op_key": OP, "task_id": TASK, "status": "in_flight", "fence": 7, "tool": "refund"} | over
    return orjson.dumps(entry)


def grant(**over: Any) -> Grant:
    fields: dict[str, Any] = {"scope": "bank", "tool": "refund", "task_id": TASK, "op_key": OP, "fence": 7}
    return Grant(**(fields | over))


@pytest.mark.parametrize(
    ("asked", "lease", "found", "refused"),
    [
        (grant(), LEASE, intent(), None),
        (grant(fence=8), b"executor-2:8", intent(), None),  # a lookup after a crash: a newer lease
        (grant(tool="peek", effect=False), LEASE, None, None),  # read-only: the lease is the proof
        (grant(scope="shop"), LEASE, intent(), "declares no credential for 'shop'"),
        (grant(tool="other"), LEASE, intent(), "declares no credential"),
        (grant(), None, intent(), "not held at fence 7"),
        (grant(), b"executor-2:8", intent(), "not held at fence 7"),  # the lease moved on
        (grant(), LEASE, None, "no intent of refund is in flight"),
        (grant(), LEASE, b"{not json", "no intent of refund is in flight"),
        (grant(), LEASE, intent(status="succeeded"), "no intent of refund is in flight"),
        (grant(), LEASE, intent(tool="peek"), "no intent of refund is in flight"),
        (grant(), LEASE, intent(fence=9), "is not this step's"),  # written by a newer holder
        (grant(), LEASE, intent(task_id="t-2"), "is not this step's"),
        (grant(task_id="t}1"), LEASE, intent(), "is not a task id"),
        (grant(op_key="A B"), LEASE, intent(), "is not an op key"),
        (grant(fence=0), b"x:0", intent(fence=0), "is not a fence"),
    ],
)
def test_the_minter_mints_only_for_a_running_step_of_a_tool_that_declares_the_scope(
    asked: Grant, lease: bytes | None, found: bytes | None, refused: str | None
) -> None:
    said = grants.unfit(asked, SCOPES) or grants.running(asked, lease, found)
    assert said is None if refused is None else refused in (said or ""), said


def test_the_record_of_a_minted_credential_holds_no_secret_and_redis_is_given_only_its_hash() -> None:
    record = orjson.loads(grant().record("wkc-" + "a" * 24, 1_000))
    assert set(record) == {"user", "scope", "tool", "task_id", "op_key", "fence", "expires_ms"}
    command = minted.setuser("wkc-" + "a" * 24, "s3cret-pass", ["+get"])
    assert "s3cret-pass" not in " ".join(command) and command[5].startswith("#")


def test_a_credentials_repr_never_shows_its_password() -> None:
    made = Credential("wkc-" + "b" * 24, "s3cret-pass", 5)
    assert "s3cret-pass" not in repr(made) and "s3cret-pass" not in str(made)


def test_credential_is_the_runs_own_and_no_one_elses() -> None:
    with pytest.raises(LookupError, match="inside a tool's call"):
        minting.credential()
    made = Credential("wkc-" + "c" * 24, "pw", 5)
    seen: list[object] = []
    with minting.handed(made):
        assert minting.credential() is made
        other = threading.Thread(target=lambda: seen.append(_tried()))
        other.start()
        other.join(5)
    assert seen == ["none"]  # a thread the runtime runs beside it is handed nothing
    with pytest.raises(LookupError):
        minting.credential()


def _tried() -> str:
    try:
        minting.credential()
    except LookupError:
        return "none"
    return "handed"


class _Args(BaseModel):
    task_id: str


class _Leaky(Tool[_Args]):
    name, args, description, stages = "refund", _Args, "d", ("s",)
    credential: ClassVar[str | None] = "bank"


class _Minter:
    def __init__(self) -> None:
        self.ended: list[str] = []

    def mint(self, asked: Grant) -> Credential:
        return Credential("wkc-" + "d" * 24, "pw-" + asked.op_key, 5)

    def end(self, user: str) -> None:
        self.ended.append(user)


@pytest.fixture
def stub_minter(monkeypatch: pytest.MonkeyPatch) -> _Minter:
    stub = _Minter()
    monkeypatch.setattr(credentials, "_minter", stub)
    return stub


def test_a_result_that_carries_the_runs_credential_fails_the_step_and_the_credential_ends(
    stub_minter: _Minter,
) -> None:
    def leak() -> dict[str, str]:
        return {"echo": minting.credential().password}

    made = guarding.held(_Leaky(), TASK, leak, (OP, 7))
    assert isinstance(made, guarding.EgressRefusal) and "returned its step's credential" in made.reason
    assert "pw-" not in made.reason and stub_minter.ended == ["wkc-" + "d" * 24]


def test_an_error_that_names_the_runs_credential_is_raised_with_it_blotted_out(stub_minter: _Minter) -> None:
    def refuse() -> dict[str, str]:
        raise ToolRefused(f"bad login {minting.credential().password}")

    with pytest.raises(ToolRefused) as raised:
        guarding.held(_Leaky(), TASK, refuse, (OP, 7))
    assert f"pw-{OP}" not in str(raised.value) and "[credential]" in str(raised.value)
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
    assert stub_minter.ended == ["wkc-" + "d" * 24]


def test_a_tool_that_declares_no_credential_is_minted_none(stub_minter: _Minter) -> None:
    class Plain(_Leaky):
        credential = None

    assert guarding.held(Plain(), TASK, lambda: {"ok": "1"}, (OP, 7)) == {"ok": "1"}
    assert stub_minter.ended == []


def test_the_minter_answers_bad_bytes_with_a_reason_and_never_reaches_redis() -> None:
    from wakeful.consumers.minter.main import Minter
    from wakeful.core.settings import Settings

    minter = Minter(Settings.from_env({}), client=None)  # type: ignore[arg-type]  # never reached
    for line in (b"\xff\xfe", b"[1, 2]", b'{"op": "mint"}', b'{"op": "mint", "fence": "x"}'):
        said = orjson.loads(minter.answer(line) or b"{}")
        assert said["ok"] is False and "unreadable request" in said["error"], (line, said)
    asked = {"op": "mint", "scope": "bank", "tool": "refund", "op_key": OP, "fence": 7}
    for bad, why in (({"scope": "nowhere"}, "no downstream"), ({"task_id": "x}:lease"}, "not a task id")):
        said = orjson.loads(minter.answer(orjson.dumps(asked | {"task_id": TASK} | bad)) or b"{}")
        assert said["ok"] is False and why in said["error"], said
    assert minter.answer(b'{"op": "end", "user": "wakeful-admin"}') is None
    assert minter.ended == ["wakeful-admin"]  # queued, and minted.end names no such user
    assert minted.end(client=None, users=["wakeful-admin", "wkc-short"]) == 0  # type: ignore[arg-type]


def test_requests_read_together_are_answered_in_their_order_and_ends_are_queued() -> None:
    from wakeful.consumers.minter.main import Minter
    from wakeful.core.settings import Settings

    minter = Minter(Settings.from_env({}), client=None)  # type: ignore[arg-type]  # no grant is fit
    asked = {"op": "mint", "scope": "bank", "tool": "refund", "task_id": TASK, "op_key": OP, "fence": 7}
    lines = [
        b"not json",
        orjson.dumps({"op": "end", "users": ["wkc-" + "a" * 24, "wkc-" + "b" * 24]}),
        orjson.dumps(asked | {"scope": "nowhere"}),
        orjson.dumps(asked | {"tool": "lookup_order"}),
    ]
    replies = minter.answer_all(lines)
    assert replies[1] is None and minter.ended == ["wkc-" + "a" * 24, "wkc-" + "b" * 24]
    said = [orjson.loads(r or b"{}")["error"] for r in (replies[0], replies[2], replies[3])]
    assert "unreadable" in said[0] and "no downstream" in said[1] and "declares no credential" in said[2]


def test_a_peer_line_is_whole_before_it_is_read_and_a_line_past_the_limit_ends_the_peer() -> None:
    import socket

    from wakeful.consumers.minter.main import MAX_LINE, _Peer

    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.setblocking(False)
        peer = _Peer(ours)
        theirs.sendall(b'{"op": "end", "users": []}\n{"op": "mi')
        assert peer.lines() == [b'{"op": "end", "users": []}']
        theirs.sendall(b'nt"}\n')
        assert peer.lines() == [b'{"op": "mint"}'] and peer.lines() == []  # nothing more yet
        theirs.sendall(b"x" * (MAX_LINE + 1))
        assert peer.lines() is None and b"at most" in theirs.recv(1000)
        theirs.close()
        assert _Peer(ours).lines() is None  # the peer is gone


def test_the_ends_connection_carries_ends_only_and_a_mint_asked_on_it_reaches_no_redis() -> None:
    import socket

    from wakeful.consumers.minter.main import Minter, _Peer
    from wakeful.core.settings import Settings

    minter = Minter(Settings.from_env({}), client=None)  # type: ignore[arg-type]  # never reached
    minter._passed = minter._due_at = float("inf")  # no removal pass is due: only the ends are read
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.setblocking(False)
        mint = {"op": "mint", "scope": "bank", "tool": "refund", "task_id": TASK, "op_key": OP, "fence": 7}
        theirs.sendall(
            orjson.dumps({"op": "end", "users": ["wkc-" + "e" * 24]}) + b"\n" + orjson.dumps(mint) + b"\n"
        )
        enders = [_Peer(ours)]
        minter.reap(0.0, enders)
    assert minter.ended == ["wkc-" + "e" * 24] and minter.mine == set() and enders
