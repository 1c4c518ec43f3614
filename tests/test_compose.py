"""compose/docker-compose.yml gives every service what its code needs, and nothing it does not.

What a role needs is read from the code, not from a list kept here: each role's main() is run
against settings that name no keyring and no Redis passwords, and every file it stops for is a
secret it needs; their Kafka clients try a broker (where nothing listens), which no test of the
unit tier may. The Redis users the init service makes are checked by running
compose/init_secrets.py and Debian's redis-server with the very commands, environment and volume
paths of the compose file, named volumes standing in as directories and each service's mounts as
links to them. What the file says on its own, and what the init service writes:
tests/unit/test_compose_file.py.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import orjson
import pytest
import redis
from compose_file import (
    COMPOSE,
    SECRETS,
    Volumes,
    depends_on,
    environment,
    load_compose,
    mounts,
    run_init,
    secret_path,
    secret_place,
    service,
    service_settings,
)
from helpers import free_ports

from wakeful.authority import signer_seal
from wakeful.consumers.kafka import producing
from wakeful.consumers.kafka.supervisor import ROLES
from wakeful.core import egress_guard, index_signing, kafka_auth, log_signing, provenance
from wakeful.core.errors import ConfigError, KeyringError, MissingCredential, WakefulError
from wakeful.core.settings import Settings
from wakeful.devstack import redis_server
from wakeful.operate import reach
from wakeful.state import acl, credentials
from wakeful.state.seal import Keyring

KINDS = {
    "keyring",
    "redis",
    "kafka",
    "signing",
    "verifying",
    "log-signing",
    signer_seal.NAME,
    "index-signing",
}


def make_secret(settings: Settings, secret: str) -> None:
    kind, _, user = secret.partition(":")
    if kind == "keyring":
        Keyring.generate().save(settings.keyring)
    elif kind == "redis":
        credentials.ensure(settings, user)
    elif kind == "kafka":
        kafka_auth.ensure_credential(settings, user)
    elif kind == "signing":
        provenance.ensure_key(settings, user)
    elif kind == "log-signing":
        log_signing.ensure_log_key(settings)
    elif kind == signer_seal.NAME:
        signer_seal.ensure(settings)  # the admin's seal and each verifier's copy, as init makes them
    elif kind in {"index-signing", "index-verifying"}:
        index_signing.ensure(settings)
    else:
        provenance.publish_keys(settings)  # each reader's file, with whatever sender keys exist


def asked_for(settings: Settings, exc: WakefulError) -> str | None:
    """The secret a role's main() stopped for, or None when it stopped for something else."""
    if isinstance(exc, KeyringError):
        return "keyring"
    if isinstance(exc, MissingCredential):
        return f"redis:{exc.role}"
    if isinstance(exc, ConfigError):
        return next((s for s in SECRETS if exc.setting == str(secret_path(settings, s))), None)
    return None


def probe_secrets(role: str, scratch: Path) -> frozenset[str]:
    """The secrets the role's main() stops for, found by running it until it stops for none."""
    env = {
        "WAKEFUL_HOME": str(scratch),
        "WAKEFUL_KAFKA_BOOTSTRAP": "127.0.0.1:9",  # nothing listens; clients connect lazily
        "WAKEFUL_REDIS_URL": "redis://127.0.0.1:9/0",
        "WAKEFUL_KEYRING": str(scratch / "keyring.json"),
        "WAKEFUL_SECRETS": str(scratch / "secrets"),
    }
    main = importlib.import_module(f"wakeful.consumers.{role}.main").main
    asked: set[str] = set()
    with pytest.MonkeyPatch.context() as patch:
        # The dlq's size limit, read from a broker that is not there, would be None after its
        # 10 s timeout: None at once. It asks for no secret of its own (the role's Kafka
        # credential is read before it, for the producer's config).
        patch.setattr(producing, "topic_max_message_bytes", lambda *_args, **_kw: None)
        for _ in range(len(SECRETS) + 1):
            settings = Settings.from_env(env)
            stop = threading.Event()
            stop.set()  # build everything, then return at once
            try:
                main(settings, stop)
            except WakefulError as exc:
                secret = asked_for(settings, exc)
                if secret is None or secret in asked:
                    raise
                asked.add(secret)
                make_secret(settings, secret)
            else:
                return frozenset(asked)
            finally:  # the executor's egress guard holds this process's tool runs no longer
                egress_guard.uninstall()
    raise AssertionError(f"{role}: main() kept stopping for secrets it had been given")


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return load_compose()


@pytest.fixture(scope="module")
def asks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, frozenset[str]]:
    needs = {role: probe_secrets(role, tmp_path_factory.mktemp(role)) for role in ROLES}
    # A probe that saw nothing would let every test below pass on a file that gives no secret out.
    assert {secret.partition(":")[0] for secret in set().union(*needs.values())} == KINDS, needs
    # the executor stops for its minter's login (D120), no longer for its tools' downstream's
    assert needs["executor"] >= {"redis:executor", "redis:minter", "kafka:executor", "verifying:executor"}, (
        needs
    )
    proposer = {"redis:proposer", "kafka:proposer", "signing:proposer", "verifying:proposer"}
    assert needs["proposer"] == proposer, needs
    return needs


def test_roles_get_each_secret_they_stop_for_from_the_volume_init_fills(
    doc: dict[str, Any], asks: dict[str, frozenset[str]]
) -> None:
    for role in ROLES:
        for secret in asks[role]:
            got = secret_place(doc, role, secret)
            assert got is not None, f"{role} stops at start: its {secret} file is on no volume"
            made = secret_place(doc, "init", secret)
            assert made is not None, f"init does not make {secret}"
            assert (got.volume, got.path) == (made.volume, made.path), f"{role} reads {secret} elsewhere"
            assert got.read_only, f"{role} only reads {secret}; mount it read-only"
        if asks[role]:
            assert depends_on(service(doc, role)).get("init") == "service_completed_successfully", (
                f"{role} may start before init has made its secrets"
            )


CHILDREN = {"executor": ("minter",)}  # a process a role starts, whose folder it mounts for it


def test_roles_get_no_secret_their_code_never_asks_for(
    doc: dict[str, Any], asks: dict[str, frozenset[str]]
) -> None:
    for role in ROLES:
        volumes = {m.volume for m in mounts(doc, service(doc, role))}
        for secret in set(SECRETS) - asks[role]:
            made = secret_place(doc, "init", secret)
            assert made is not None, f"init does not make {secret}"
            if secret.partition(":")[2] in (role, *CHILDREN.get(role, ())):
                # Its own folder holds all of its own secrets, used or not: nothing there is
                # another role's. So does its child's: the executor's minter (D120) logs in to
                # Kafka only for a tool of a Kafka downstream (D123), to Redis always.
                continue
            assert made.volume not in volumes, f"{role} never uses {secret} but mounts {made.volume}"


def test_roles_reach_kafka_and_redis_by_service_name_and_wait_for_them(
    doc: dict[str, Any], asks: dict[str, frozenset[str]]
) -> None:
    services = doc["services"]
    topic_makers = [name for name, s in services.items() if s.get("command") == ["admin", "topics"]]
    assert topic_makers, "no service creates the topics, and brokers here do not auto-create them"
    for role in ROLES:
        settings = service_settings(service(doc, role))
        deps = depends_on(service(doc, role))
        kafka_host = settings.kafka_bootstrap.split(",")[0].rpartition(":")[0]
        assert kafka_host in services, f"{role} looks for Kafka at {settings.kafka_bootstrap}"
        assert deps.get(kafka_host) == "service_healthy"
        assert deps.get(topic_makers[0]) == "service_completed_successfully", (
            f"{role} may subscribe before its topics exist"
        )
        if any(secret.startswith("redis:") for secret in asks[role]):
            redis_host = urlparse(settings.redis_url).hostname or ""
            assert redis_host in services, f"{role} looks for Redis at {settings.redis_address}"
            assert deps.get(redis_host) == "service_healthy"


# ---- the init service and Redis, run as compose runs them --------------------------------------


def free_port() -> int:
    """A loopback port nothing listens on now (the local stack's ports are left alone), where no
    outgoing connection takes it before the server binds it (helpers.claimable_ports)."""
    [port] = free_ports(1)
    return port


class RedisLikeCompose:
    """Debian's redis-server with the compose service's command, on a free loopback port."""

    def __init__(self, doc: dict[str, Any], volumes: Volumes) -> None:
        exe = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not Path(exe).exists():
            pytest.fail(f"redis-server is not installed: {redis_server.INSTALL_HINT}")
        command = service(doc, "redis")["command"]
        self.port = free_port()
        self.argv = [exe, *(volumes.host("redis", arg) for arg in command[1:])]
        self.argv += ["--bind", "127.0.0.1", "--port", str(self.port)]
        self.log = volumes.root / "redis.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        with self.log.open("ab") as log:
            # Started in the scratch dir, so that a file with no --dir never writes into the project.
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.log.parent)
        deadline = time.monotonic() + 20
        while not reach.healthy(self.url, timeout=0.5):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"redis-server did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
        self.proc = None


@pytest.fixture()
def volumes(doc: dict[str, Any], tmp_path: Path) -> Volumes:
    return Volumes(doc, tmp_path)


@pytest.fixture()
def redis_like_compose(doc: dict[str, Any], volumes: Volumes) -> Iterator[RedisLikeCompose]:
    run_init(doc, volumes)
    server = RedisLikeCompose(doc, volumes)
    server.start()
    yield server
    server.stop()


def client_of(volumes: Volumes, server: RedisLikeCompose, name: str, role: str | None = None) -> redis.Redis:
    """The Redis client that the service's own settings in the compose file give it."""
    settings = Settings.from_env(volumes.env(name, WAKEFUL_REDIS_URL=server.url))
    return acl.connect(settings, role or name)


def test_every_role_logs_in_to_redis_as_compose_starts_it_even_after_a_restart(
    doc: dict[str, Any],
    volumes: Volumes,
    redis_like_compose: RedisLikeCompose,
    asks: dict[str, frozenset[str]],
) -> None:
    logins = [
        (role, secret.partition(":")[2])
        for role in ROLES
        for secret in asks[role]
        if secret.startswith("redis:")
    ]
    stranger = redis.Redis.from_url(redis_like_compose.url)
    with pytest.raises(redis.AuthenticationError):
        stranger.ping()
    # A transaction before the restart must be replayed from the AOF after it (decisions.md D16).
    owner = client_of(volumes, redis_like_compose, "cli", "admin")
    with owner.pipeline(transaction=True) as pipe:
        pipe.set("compose-test:tx", "kept")
        pipe.execute()
    assert ("executor", "minter") in logins and ("gate", "gate") in logins, logins  # D120: its minter's
    for restarted in (False, True):
        for service_name, user in logins:
            assert client_of(volumes, redis_like_compose, service_name, user).ping(), (user, restarted)
        if not restarted:
            redis_like_compose.stop()
            redis_like_compose.start()
    assert owner.get("compose-test:tx") == b"kept"


def test_rotating_one_redis_password_locks_out_only_the_old_one(
    doc: dict[str, Any], volumes: Volumes, redis_like_compose: RedisLikeCompose
) -> None:
    def passwords() -> dict[str, str]:
        files = {secret: volumes.file("init", secret) for secret in SECRETS if secret.startswith("redis:")}
        return {secret: orjson.loads(path.read_bytes())["password"] for secret, path in files.items()}

    before = passwords()
    keyring = volumes.file("init", "keyring").read_bytes()
    out = run_init(doc, volumes, "--rotate-redis", "gate")
    assert before["redis:gate"] not in out, "init printed a password"
    after = passwords()
    assert after["redis:gate"] != before["redis:gate"]
    assert {k: v for k, v in after.items() if k != "redis:gate"} == {
        k: v for k, v in before.items() if k != "redis:gate"
    }
    assert volumes.file("init", "keyring").read_bytes() == keyring
    redis_like_compose.stop()
    redis_like_compose.start()
    old = redis.Redis.from_url(
        redis_like_compose.url, username=acl.user_name("gate"), password=before["redis:gate"]
    )
    with pytest.raises(redis.AuthenticationError):
        old.ping()
    assert client_of(volumes, redis_like_compose, "gate").ping()
    assert client_of(volumes, redis_like_compose, "executor").ping()


# ---- a compose client, where one is installed ----------------------------------------------------


def _compose_client() -> tuple[list[str] | None, list[str]]:
    """The first Compose v2 client found, and what was found and passed over."""
    seen: list[str] = []
    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, check=False, timeout=30)
        if probe.returncode == 0:
            return [docker, "compose"], seen
        seen.append(f"{docker} (without its compose plugin)")
    standalone = shutil.which("docker-compose")
    if standalone:
        version = subprocess.run(
            [standalone, "version", "--short"], capture_output=True, text=True, check=False, timeout=30
        ).stdout.strip()
        if version.lstrip("v").split(".")[0].isdigit() and int(version.lstrip("v").split(".")[0]) >= 2:
            return [standalone], seen
        seen.append(f"{standalone} {version or '(unknown version)'}, older than the Compose Specification")
    return None, seen


def test_compose_client_reads_the_file_as_these_tests_do() -> None:
    """These tests and tests/unit/test_compose_file.py read the YAML with PyYAML; the engine's client
    must see the same services (anchors and merge keys included), or they check a file nobody runs."""
    client, seen = _compose_client()
    if client is None:
        pytest.skip(
            "no Compose v2 client here: looked for `docker compose` (the docker CLI plugin) and a 2.x "
            f"`docker-compose` on PATH; found {'; '.join(seen) or 'neither'}. Install Docker's compose "
            "plugin (package docker-compose-plugin from Docker's apt repository, or a release binary in "
            "~/.docker/cli-plugins/docker-compose) to check the file with the client users run."
        )
    result = subprocess.run(
        [*client, "-f", str(COMPOSE), "--profile", "ops", "config", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    model: dict[str, Any] = orjson.loads(result.stdout)
    doc = load_compose()
    assert set(model["services"]) == set(doc["services"])
    for name, ours in doc["services"].items():
        theirs = model["services"][name]
        assert theirs.get("command") == ours.get("command"), name
        assert theirs.get("entrypoint") == ours.get("entrypoint"), name
        assert environment(theirs) == environment(ours), name
        assert depends_on(theirs) == depends_on(ours), name
        assert set(mounts(model, theirs)) == set(mounts(doc, ours)), name
