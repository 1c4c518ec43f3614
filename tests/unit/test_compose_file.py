"""compose/docker-compose.yml, read as a file: every role runs as a service of its own, the init
service writes the keyring and the Redis users where it may, Redis keeps an AOF on its volume and
loads the users init wrote, roles that call Redis functions start after the admin loaded them, and
only init and the admin's services see the admin's folder. The init service, run as compose runs
it, writes a broker configuration of one KRaft node that admits SASL logins only, and a second run
keeps what the first made. What each role's code asks for, and Redis run as compose runs it:
tests/test_compose.py."""

from __future__ import annotations

import re
import stat
from pathlib import Path
from typing import Any

import pytest
from compose_file import (
    SECRETS,
    Volumes,
    depends_on,
    init_aclfile,
    init_argv,
    load_compose,
    mounts,
    place,
    redis_options,
    run_init,
    secret_place,
    service,
)

from wakeful.consumers.kafka.supervisor import ROLES
from wakeful.core import kafka_rights
from wakeful.state import library
from wakeful.state.seal import Keyring


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return load_compose()


@pytest.fixture()
def volumes(doc: dict[str, Any], tmp_path: Path) -> Volumes:
    return Volumes(doc, tmp_path)


def test_every_supervised_role_runs_as_its_own_service(doc: dict[str, Any]) -> None:
    for role in ROLES:
        runs = service(doc, role)
        assert runs["command"] == ["worker", role]
        assert runs["build"]["dockerfile"] == "compose/Dockerfile"
        assert runs.get("restart") == "unless-stopped", f"{role} is not restarted when it dies"


def test_init_service_makes_the_keyring_and_redis_users_on_volumes_it_may_write(
    doc: dict[str, Any],
) -> None:
    for secret in SECRETS:
        where = secret_place(doc, "init", secret)
        assert where is not None, f"init keeps {secret} off every named volume: it is lost with the container"
        assert not where.read_only, f"init cannot write {secret}"
    assert service(doc, "init").get("restart") == "no", "init must run once per `up` and stay done"


def test_roles_that_call_redis_functions_start_after_the_admin_has_loaded_them(doc: dict[str, Any]) -> None:
    services = doc["services"]
    loaders = [name for name, s in services.items() if s.get("command") == ["admin", "functions"]]
    assert loaders, "no service loads the function library, and no role may load it (decisions.md D31)"
    loader = loaders[0]
    assert service(doc, loader).get("restart") == "no"
    assert depends_on(service(doc, loader)).get("redis") == "service_healthy"
    assert depends_on(service(doc, loader)).get("init") == "service_completed_successfully"
    got, made = secret_place(doc, loader, "redis:admin"), secret_place(doc, "init", "redis:admin")
    assert got is not None and made is not None and (got.volume, got.path) == (made.volume, made.path)
    assert got.read_only
    for role in library.CALLERS:
        assert depends_on(service(doc, role)).get(loader) == "service_completed_successfully", (
            f"{role} may start before the functions it calls are loaded"
        )


def test_only_init_and_the_admin_services_see_the_admin_folder(doc: dict[str, Any]) -> None:
    admin = secret_place(doc, "init", "redis:admin")
    default = secret_place(doc, "init", "redis:default")
    assert admin is not None and default is not None and admin.volume == default.volume
    seen = {name for name, s in doc["services"].items() if admin.volume in {m.volume for m in mounts(doc, s)}}
    assert seen == {"init", "cli", "functions", "kafka-acl", "topics"}, seen


def test_redis_appends_every_write_to_an_aof_on_its_volume(doc: dict[str, Any]) -> None:
    redis_service = service(doc, "redis")
    options = redis_options(redis_service["command"])
    assert options.get("appendonly") == "yes"
    assert options.get("appendfsync") in ("everysec", "always")
    assert "dir" in options, "name the data dir: the AOF must be on the volume, not wherever Redis starts"
    assert place(doc, redis_service, options["dir"]) is not None, f"Redis writes its AOF to {options['dir']}"


def test_redis_starts_after_init_and_loads_users_from_the_file_init_writes(doc: dict[str, Any]) -> None:
    redis_service = service(doc, "redis")
    options = redis_options(redis_service["command"])
    assert "aclfile" in options, "Redis has no users for the roles to log in as"
    loaded = place(doc, redis_service, options["aclfile"])
    written = place(doc, service(doc, "init"), init_aclfile(doc))
    assert loaded is not None, f"Redis loads its users from {options['aclfile']}, on no volume"
    assert written is not None, "init writes Redis's users on no volume"
    assert (loaded.volume, loaded.path) == (written.volume, written.path)
    assert loaded.read_only
    assert depends_on(redis_service).get("init") == "service_completed_successfully"


# ---- the init service, run as compose runs it (compose/init_secrets.py; no server) -------------


def init_kafka_config(doc: dict[str, Any]) -> str:
    argv = init_argv(doc)
    assert "--kafka-config" in argv, "init does not write the broker's configuration"
    return argv[argv.index("--kafka-config") + 1]


def kafka_server_properties(doc: dict[str, Any], volumes: Volumes) -> dict[str, str]:
    """The server.properties init writes, read where the kafka service mounts it (read-only)."""
    run_init(doc, volumes)
    written = place(doc, service(doc, "init"), init_kafka_config(doc))
    script = "\n".join(service(doc, "kafka")["entrypoint"])
    conf = re.search(r"conf=(\S+)", script)
    assert conf, "the kafka service does not start from the configuration init writes"
    read = place(doc, service(doc, "kafka"), conf.group(1))
    assert written is not None and read is not None and read.read_only
    assert (written.volume, written.path) == (read.volume, read.path)
    text = (Path(volumes.host("init", init_kafka_config(doc))) / "server.properties").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_kafka_is_one_kraft_node_that_keeps_its_log_on_a_volume(
    doc: dict[str, Any], volumes: Volumes
) -> None:
    kafka = service(doc, "kafka")
    assert kafka["image"].startswith("apache/kafka:4.")
    props = kafka_server_properties(doc, volumes)
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"].startswith(f"{props['node.id']}@")
    assert "zookeeper.connect" not in props
    # Unset, the image logs to /tmp/kraft-combined-logs: topics and offsets die with the container.
    for log_dir in props["log.dirs"].split(","):
        assert place(doc, kafka, log_dir) is not None, f"Kafka's log dir {log_dir} is on no volume"


def test_kafka_admits_only_sasl_logins_and_authorizes_by_acl(doc: dict[str, Any], volumes: Volumes) -> None:
    props = kafka_server_properties(doc, volumes)
    protocols = dict(pair.split(":") for pair in props["listener.security.protocol.map"].split(","))
    listeners = [entry.split("://")[0] for entry in props["listeners"].split(",")]
    assert all(protocols[name] == "SASL_PLAINTEXT" for name in listeners), protocols
    assert props["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["super.users"] == kafka_rights.principal(kafka_rights.ADMIN)
    folder = Path(volumes.host("init", init_kafka_config(doc)))
    assert stat.S_IMODE((folder / "server.properties").stat().st_mode) == 0o600, "it holds the admin password"


def test_a_second_init_keeps_the_keyring_and_passwords_it_made(doc: dict[str, Any], volumes: Volumes) -> None:
    run_init(doc, volumes)
    files = [volumes.file("init", secret) for secret in SECRETS]
    aclfile = Path(volumes.host("init", init_aclfile(doc)))
    first = {path: path.read_bytes() for path in [*files, aclfile]}
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, f"{path.name} is readable by others"
    Keyring.load(volumes.file("init", "keyring"))
    run_init(doc, volumes)
    assert {path: path.read_bytes() for path in first} == first, "a second `up` replaced a secret"


def test_kafka_acl_reads_every_kafka_password_init_made_and_invents_none(doc: dict[str, Any]) -> None:
    """`admin kafka-acl --apply` sets each principal's SCRAM password from its kafka.json, making
    one where it finds none: a folder it cannot see gets a password no role holds, and that role
    is refused by Kafka."""
    for principal in kafka_rights.ROLES:
        made = secret_place(doc, "init", f"kafka:{principal}")
        got = secret_place(doc, "kafka-acl", f"kafka:{principal}")
        assert made is not None, f"init keeps kafka:{principal} off every named volume"
        assert got is not None and (got.volume, got.path) == (made.volume, made.path), (
            f"kafka-acl does not see the kafka.json init made for {principal}"
        )
