"""Shared fixtures: the real Kafka and Redis that `wakeful dev up` starts (or that the
environment names). A missing server is a loud failure that says how to start it, never a skip."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import hypothesis
import pytest
import redis
from helpers import BankClient

from wakeful.consumers import wiring
from wakeful.core.settings import Settings
from wakeful.devstack import kafka, redis_server
from wakeful.state import acl
from wakeful.state.lease import Leases
from wakeful.state.store import Store

START_HINT = "Start the local stack with `wakeful dev up` (or run `bash scripts/test`)."
UNIT = Path(__file__).parent / "unit"

# Speed is measured by benchmarks, never by timed assertions: a property test on a loaded machine
# is not a failure for being slow.
hypothesis.settings.register_profile("wakeful", deadline=None)
hypothesis.settings.load_profile("wakeful")


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/unit is a `unit` test: `python -m pytest -m unit` runs the pure tier,
    `-m "not unit"` the tests that need the stack (tests/unit/conftest.py keeps the tier pure)."""
    for item in items:
        if item.path.is_relative_to(UNIT):
            item.add_marker(pytest.mark.unit)


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings.from_env()


@pytest.fixture(scope="session")
def kafka_bootstrap(settings: Settings) -> str:
    if not kafka.healthy(settings, timeout=5.0):
        pytest.fail(f"Kafka is not reachable at {settings.kafka_bootstrap}. {START_HINT}")
    return settings.kafka_bootstrap


@pytest.fixture(scope="session")
def redis_url(settings: Settings) -> str:
    if not redis_server.healthy(settings.redis_url, timeout=5.0):
        pytest.fail(f"Redis is not reachable at {settings.redis_url}. {START_HINT}")
    return settings.redis_url


@pytest.fixture()
def redis_client(settings: Settings, redis_url: str) -> Iterator[redis.Redis]:
    """An admin connection, for tests that inspect or tamper with raw keys."""
    client = acl.connect(settings, "admin")
    yield client
    client.close()


@pytest.fixture()
def unique() -> str:
    return uuid.uuid4().hex[:12]


@pytest.fixture(scope="session")
def gate_store(settings: Settings, redis_url: str) -> Store:
    return wiring.store_for(settings, "gate")


@pytest.fixture(scope="session")
def executor_store(settings: Settings, redis_url: str) -> Store:
    """The store as the executor, the one role that holds task leases (D49)."""
    return wiring.store_for(settings, "executor")


@pytest.fixture(scope="session")
def leases(settings: Settings, redis_url: str) -> Leases:
    """Leases as the executor takes them."""
    return wiring.leases_for(settings, "executor")


@pytest.fixture(scope="module")
def client(settings: Settings, kafka_bootstrap: str, redis_url: str) -> Iterator[BankClient]:
    """An upstream system and operator, with the local authority defaults restored."""
    c = BankClient(settings)
    c.reset_authority()
    yield c
    c.close()
