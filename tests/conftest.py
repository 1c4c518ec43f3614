"""Shared fixtures: the real Kafka and Redis that `wakeful dev up` starts (or that the
environment names), and one fleet of role processes for the modules that need no fleet of their
own. A missing server is a loud failure that says how to start it, never a skip."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
import warnings
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import redis
from helpers import BankClient, free_port_run, start_fleet

from wakeful.consumers.kafka import wiring
from wakeful.consumers.kafka.supervisor import METRICS_PORT_ENV, ROLES
from wakeful.core.settings import Settings
from wakeful.devstack import kafka
from wakeful.devstack.fleet import Fleet
from wakeful.operate import reach
from wakeful.operate.client import Client
from wakeful.state import acl
from wakeful.state.lease import Leases
from wakeful.state.store import Store

START_HINT = "Start the local stack with `wakeful dev up` (or run `bash scripts/test`)."
UNIT = Path(__file__).parent / "unit"
SHARED = "shared_fleet"  # the fixture of the session's one fleet (SharedFleet)

# Speed is measured by benchmarks, never by timed assertions: a property test on a loaded machine
# is not a failure for being slow.
hypothesis.settings.register_profile("wakeful", deadline=None)
hypothesis.settings.load_profile("wakeful")


# The modules that take 45 s or more of a run on three workers (`--durations=0`, setup and teardown
# included, summed per module), longest first: under pytest-xdist each is given to a worker before
# the short ones, so that none starts last and keeps one worker busy while the others wait. Refresh
# it when a module grows or shrinks.
LONGEST = (
    "test_crashes.py",  # 350 s
    "test_outage_drill.py",  # 220
    "test_redrive.py",  # 175
    "test_chaos.py",  # 165
    "test_recovery_drill.py",  # 140
    "test_steps_loop.py",  # 135
    "test_support_crashes.py",  # 125
    "test_devstack_lifecycle.py",  # 115
    "test_lease_heartbeat.py",  # 105
    "test_controls_stack.py",  # 105
    "test_dlq_bulk.py",  # 100
    "test_rebalance.py",  # 90
    "test_demo.py",  # 80
    "test_backlog.py",  # 75
    "test_dlq_cli.py",  # 70
    "test_redis_cluster.py",  # 65
    "test_schedules_stack.py",  # 65
    "test_resume.py",  # 55
    "test_credentials_stack.py",  # 55
    "test_supervisor.py",  # 55
    "test_async_tools.py",  # 50
    "test_kill_path.py",  # 50
    "test_release_signoff_stack.py",  # 50
    "test_owner_changes_stack.py",  # 50
    "test_tool_switches.py",  # 50
    "test_reproposals_stack.py",  # 50
    "test_audit.py",  # 45
    "test_cli_any_app.py",  # 45
    "test_demo_openai.py",  # 45
)
WORKER_STRIDE = 10  # worker N's ports are the base ones + 10 N: a Redis cluster's nodes take REDIS_PORT+1..+3
WORKER_STACK = pytest.StashKey[dict[str, str]]()


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (`bash scripts/test` runs the server tier as `-n N --dist loadfile`), each
    worker but the first runs against a stack of its own: a state dir beside the configured one and
    ports 10 N above it, started here and stopped when the worker ends. The first worker uses the
    stack the run was given. A module's tests, and so its fleets, stay on one worker."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    if worker == "gw0" or re.match(r"\s*unit\b", config.option.markexpr):  # the unit tier needs none
        return
    n = int(worker.removeprefix("gw"))
    base = Settings.from_env()
    env = {
        "WAKEFUL_HOME": str(base.home.parent / f"{base.home.name}-{worker}"),
        "WAKEFUL_KAFKA_PORT": str(base.kafka_port + WORKER_STRIDE * n),
        "WAKEFUL_KAFKA_CONTROLLER_PORT": str(base.kafka_controller_port + WORKER_STRIDE * n),
        "WAKEFUL_REDIS_PORT": str(base.redis_port + WORKER_STRIDE * n),
    }
    if base.kafka_bootstrap_external or not base.runs_local_redis:
        raise pytest.UsageError(
            "run the server tier on one worker against servers of your own (WAKEFUL_KAFKA_BOOTSTRAP, "
            "WAKEFUL_REDIS_URL): each further worker needs a local stack of its own"
        )
    os.environ.update(env)
    up = subprocess.run(
        [sys.executable, "-m", "wakeful.cli.main", "dev", "up"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if up.returncode != 0:
        raise pytest.UsageError(f"worker {worker}'s stack did not start ({env}):\n{up.stdout}{up.stderr}")
    config.stash[WORKER_STACK] = env


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop the worker's stack before the worker reports its session finished: once the run is
    over, pytest-xdist gives a worker 10 s to exit and then kills it, and a broker's stop alone can
    take longer than that."""
    if session.config.stash.get(WORKER_STACK, None) is not None:
        subprocess.run(
            [sys.executable, "-m", "wakeful.cli.main", "dev", "down"],
            capture_output=True,
            timeout=300,
            check=False,
        )


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test under tests/unit is a `unit` test: `python -m pytest -m unit` runs the pure tier,
    `-m "not unit"` the tests that need the stack (tests/unit/conftest.py keeps the tier pure).

    The modules that use the shared fleet run one after another, from where the first of them is,
    so that it starts once; each module's tests keep their order. Under pytest-xdist a worker takes
    whole modules (`--dist loadfile`) in the order xdist_place gives."""
    for item in items:
        if item.path.is_relative_to(UNIT):
            item.add_marker(pytest.mark.unit)
    sharing = {item.path for item in items if SHARED in getattr(item, "fixturenames", ())}
    config.stash[SHARING] = sharing
    if "PYTEST_XDIST_WORKER" in os.environ:  # workers take whole modules, longest first
        items.sort(key=lambda i: xdist_place(i.path, sharing))
        return
    first = next((i for i, item in enumerate(items) if item.path in sharing), len(items))
    rest = items[first:]
    items[first:] = [i for i in rest if i.path in sharing] + [i for i in rest if i.path not in sharing]


def xdist_place(path: Path, sharing: set[Path]) -> tuple[int, int]:
    """Where a module's tests go in the order pytest-xdist's workers take modules in: the long ones
    that start no shared fleet, longest first (LONGEST); then every module that uses the shared fleet,
    one after another, the long ones first; then the rest. A worker thus starts the shared fleet
    about once, where modules with and without it taken in turn stopped and started it again at
    each move to one with it (each start and stop costs seconds), and the short modules fill the
    end of the run."""
    rank = LONGEST.index(path.name) if path.name in LONGEST else len(LONGEST)
    if path in sharing:
        return 1, rank
    return (0 if path.name in LONGEST else 2), rank


@pytest.hookimpl(wrapper=True, trylast=True)  # inside output capture: a stopping fleet's lines are the test's
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
    """After the last test of the modules that share the fleet (their own fixtures torn down first),
    the fleet stops: the next module may start a fleet of its own, and one runs per state dir."""
    try:
        return (yield)
    finally:
        shared = item.config.stash.get(FLEETS, None)
        if shared is not None and (
            nextitem is None or nextitem.path not in item.config.stash.get(SHARING, set())
        ):
            shared.stop()


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
    if not reach.healthy(settings.redis_url, timeout=5.0):
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


class SharedFleet:
    """One process per role with the default settings, started for the first test that asks for it
    and kept for every module that uses it, instead of one fleet per module (each start costs
    seconds). A test on it may stop and start a role again, as long as it leaves the fleet whole:
    one that lost a process is replaced before the next test, with a warning that names it."""

    def __init__(self) -> None:
        self.fleet: Fleet | None = None

    def get(self, client: Client) -> Fleet:
        if self.fleet is not None:
            dead = [m for m in self.fleet.members if not self.fleet.alive(m)]
            if dead:
                warnings.warn(
                    f"the shared fleet lost {', '.join(dead)} (logs in {self.fleet.dir}): a fresh one "
                    "takes its place",
                    stacklevel=1,
                )
                self.stop()
        if self.fleet is None:
            # Each process serves its metrics on a port of its own (tests/test_metrics_stack.py).
            ports = {METRICS_PORT_ENV: str(free_port_run(len(ROLES)))}
            self.fleet = start_fleet(client, env={**os.environ, **ports})
        return self.fleet

    def stop(self) -> None:
        if self.fleet is not None:
            fleet, self.fleet = self.fleet, None
            fleet.stop()


FLEETS = pytest.StashKey[SharedFleet]()
SHARING = pytest.StashKey[set[Path]]()  # the modules with a test that uses the shared fleet


@pytest.fixture(scope="session")
def fleets(request: pytest.FixtureRequest) -> Iterator[SharedFleet]:
    shared = request.config.stash[FLEETS] = SharedFleet()
    yield shared
    shared.stop()


@pytest.fixture()
def shared_fleet(fleets: SharedFleet, client: Client) -> Fleet:
    """The session's fleet (SharedFleet): for tests that need the roles running as `wakeful worker
    all` runs them. A test that needs other settings, or kills processes, starts a fleet of its own."""
    return fleets.get(client)
