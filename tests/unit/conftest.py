"""The unit tier: every test in this folder is pure. It reaches no Kafka, no Redis and no server but
one it starts in this process (a stand-in, such as the scripted model server), and reads nothing
that `wakeful dev up` made. tests/conftest.py marks each one `unit`: `python -m pytest -m unit` runs
them all with no server up, and `bash scripts/test` runs them before it starts the stack.

Held, not hoped for:
- each test runs in an environment of nowhere: the caller's WAKEFUL_ settings dropped, a state dir
  of its own that `dev up` never filled, ports on which nothing listens; processes it starts
  inherit it;
- a socket it connects to anything but a loopback port this process listens on fails the test,
  naming it;
- asking for a fixture of the stack (settings, client, redis_url, ...) fails the test.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import socket
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

HERE = Path(__file__).parent
MOVE = "a test that needs a server belongs with the integration tests: move it out of tests/unit"
STACK_FIXTURES = (
    "settings",
    "kafka_bootstrap",
    "redis_url",
    "redis_client",
    "gate_store",
    "executor_store",
    "leases",
    "client",
    "shared_fleet",
)
# Ports below 1024 that no server of ours takes and the kernel never hands out for port 0.
NOWHERE_PORTS = {"WAKEFUL_KAFKA_PORT": "1", "WAKEFUL_KAFKA_CONTROLLER_PORT": "2", "WAKEFUL_REDIS_PORT": "3"}

_listening: set[int] = set()  # loopback ports this process has listened on: its tests' stand-ins
_nowhere: dict[str, str] = {}


class ServerReached(ConnectionRefusedError):
    """A test of the unit tier connected to a server it did not start."""


def nowhere(config: pytest.Config) -> dict[str, str]:
    """The settings every unit test runs with: made once per run, removed at its end."""
    if not _nowhere:
        root = Path(tempfile.mkdtemp(prefix="wakeful-unit-"))
        config.add_cleanup(lambda: shutil.rmtree(root, ignore_errors=True))
        _nowhere.update(NOWHERE_PORTS, WAKEFUL_HOME=str(root / "home"), WAKEFUL_CACHE=str(root / "cache"))
    return _nowhere


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
    # Around set-up, call and teardown, so that module fixtures see it too. pytest calls this hook
    # for every test of the run, not only for this folder's: the others are left as they are.
    if not item.path.is_relative_to(HERE):
        return (yield)
    saved = dict(os.environ)
    for name in [name for name in os.environ if name.startswith("WAKEFUL_")]:
        del os.environ[name]
    os.environ.update(nowhere(item.config))
    try:
        return (yield)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _own(address: Any) -> bool:
    """Whether `address` is a loopback port that this process listens on (or listened on)."""
    host, port = address[0], address[1]
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
    return loopback and port in _listening


@contextlib.contextmanager
def reaching_nothing(item: pytest.Item) -> Iterator[None]:
    """One phase of a test, failed if it connected anywhere but to a stand-in of its own. A client
    that catches the refusal and raises its own error still fails with this message."""
    reached: list[str] = []
    connect, connect_ex, listen = socket.socket.connect, socket.socket.connect_ex, socket.socket.listen

    # Any: socket's own methods are typed on its C base class.
    def refuse(sock: Any, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _own(address):
            reached.append(repr(address))
            raise ServerReached(f"{item.nodeid} connected to {address!r}: {MOVE}")

    def guarded_connect(sock: Any, address: Any) -> None:
        refuse(sock, address)
        connect(sock, address)

    def guarded_connect_ex(sock: Any, address: Any) -> int:
        refuse(sock, address)
        return connect_ex(sock, address)

    def noted_listen(sock: Any, *backlog: int) -> None:
        listen(sock, *backlog)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            _listening.add(sock.getsockname()[1])

    def failed() -> NoReturn:
        addresses = ", ".join(dict.fromkeys(reached))  # once each, however often a client retried
        pytest.fail(f"{item.nodeid} connected to {addresses}: {MOVE}", pytrace=False)

    socket.socket.connect, socket.socket.connect_ex, socket.socket.listen = (  # type: ignore[method-assign]
        guarded_connect,
        guarded_connect_ex,
        noted_listen,
    )
    try:
        yield
    except BaseException:
        if reached:
            failed()
        raise
    finally:
        socket.socket.connect, socket.socket.connect_ex, socket.socket.listen = (  # type: ignore[method-assign]
            connect,
            connect_ex,
            listen,
        )
    if reached:
        failed()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    with reaching_nothing(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with reaching_nothing(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    with reaching_nothing(item):
        return (yield)


def _refused(name: str) -> Any:
    @pytest.fixture(name=name, scope="session")
    def refused() -> NoReturn:
        pytest.fail(f"`{name}` is a fixture of the local stack: {MOVE}", pytrace=False)

    return refused


# The stack's fixtures of tests/conftest.py, each overridden here by one that fails the test.
for _name in STACK_FIXTURES:
    globals()[f"_no_{_name}"] = _refused(_name)
