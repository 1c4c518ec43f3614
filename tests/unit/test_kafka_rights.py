"""The one table of Kafka rights (core/kafka_rights.py) says what DESIGN.md section 2 says, the
code that builds clients asks for nothing it does not grant, and `wakeful admin kafka-acl` prints it.
Pure: no broker (the broker holding to it: tests/test_kafka_acl.py)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from wakeful.consumers.kafka.supervisor import ROLES as PROCESS_ROLES
from wakeful.core import topics
from wakeful.core.errors import StackError
from wakeful.core.kafka_rights import ADMIN, RIGHTS, UPSTREAM, Acl, acls, all_acls, principal, writers
from wakeful.core.settings import Settings
from wakeful.devstack import kafka, kafka_props

ROOT = Path(__file__).resolve().parents[2]

# DESIGN.md section 2, topic by topic: who writes it, who reads it.
WRITERS = {
    # upstream systems, the HTTP door that takes their posts, and the timers' schedule ticks (D104)
    topics.EVENTS: {UPSTREAM, "ingress", "timer"},
    topics.WAKE: {"inbound", "timer"},  # signed events, and deadline wakes
    topics.PROPOSALS_REQUEST: {"gate"},
    topics.PROPOSALS: {"proposer"},
    topics.LOG: {"relay"},
    topics.DLQ: {"inbound", "gate", "proposer", "executor", "relay"},
    topics.AUTHORITY: set(),  # the admin's sealed copy of authority: no role writes it
}
READERS = {
    topics.EVENTS: {"inbound"},
    topics.WAKE: {"gate"},
    topics.PROPOSALS_REQUEST: {"proposer"},
    topics.PROPOSALS: {"executor"},
    topics.LOG: set(),  # the audit log is read by operators, as the admin
    topics.DLQ: set(),
    topics.AUTHORITY: set(),
}


def test_every_topic_has_exactly_the_writers_the_design_names() -> None:
    assert set(WRITERS) == set(topics.ALL)
    for topic, named in WRITERS.items():
        assert writers(topic) == named, topic


def test_every_topic_has_exactly_the_readers_the_design_names() -> None:
    for topic, named in READERS.items():
        assert {role for role, rights in RIGHTS.items() if topic in rights.reads} == named, topic


def test_every_process_role_the_http_door_and_the_upstream_publisher_have_a_principal() -> None:
    # and the minter, a process the executor starts, which makes the Kafka downstreams' tokens (D123)
    assert set(RIGHTS) == {*PROCESS_ROLES, "ingress", "minter", UPSTREAM, ADMIN}


def test_the_admin_is_the_only_super_user_and_needs_no_acl() -> None:
    assert acls(ADMIN) == []
    props = dict(line.split("=", 1) for line in kafka_props.security("wakeful-admin", "pw"))
    assert props["super.users"] == principal(ADMIN)
    assert props["allow.everyone.if.no.acl.found"] == "false"


def test_no_listener_of_the_local_broker_admits_a_client_without_a_login() -> None:
    props = dict(line.split("=", 1) for line in kafka_props.listeners(1, 2))
    protocols = dict(pair.split(":") for pair in props["listener.security.protocol.map"].split(","))
    assert set(protocols.values()) == {"SASL_PLAINTEXT"}


def test_each_consumer_group_belongs_to_exactly_one_role() -> None:
    owners: dict[str, list[str]] = {}
    for role, rights in RIGHTS.items():
        for group in rights.groups:
            owners.setdefault(group, []).append(role)
    assert all(len(roles) == 1 for roles in owners.values()), owners


CONSUMERS = {"group_consumer", "consumer_config"}  # (settings, role, group) -> a role's group consumer


def test_every_role_joins_only_the_groups_and_reads_only_the_topics_it_is_granted() -> None:
    """Read from the source: each role's group_consumer(settings, role, group) (or consumer_config,
    with the same arguments) and its Runner topic."""
    for role in PROCESS_ROLES:
        tree = ast.parse((ROOT / "consumers" / role / "main.py").read_text())
        seen: set[str] = set()
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            name = getattr(call.func, "id", getattr(call.func, "attr", ""))
            args = [str(a.value) if isinstance(a, ast.Constant) else None for a in call.args]
            seen.add(name)
            if name in CONSUMERS:
                assert args[1] == role, f"{role} builds a consumer as {args[1]}"
                assert args[2] in RIGHTS[role].groups, f"{role} joins {args[2]}"
            if name in ("make_producer", "producer_config"):
                assert args[1] == role, f"{role} builds a producer as {args[1]}"
            if name == "Runner":
                topic = call.args[1]
                assert isinstance(topic, ast.Attribute), role
                assert getattr(topics, topic.attr) in RIGHTS[role].reads, f"{role} consumes {topic.attr}"
            if name == "run_role":  # (settings, stop, role, topic, ...): its producer, group and runner
                assert args[2] == role, f"{role} runs as {args[2]}"
                assert f"wakeful-{role}" in RIGHTS[role].groups, f"{role} joins wakeful-{role}"
                topic = call.args[3]
                assert isinstance(topic, ast.Attribute), role
                assert getattr(topics, topic.attr) in RIGHTS[role].reads, f"{role} consumes {topic.attr}"
        assert seen & {"make_producer", "producer_config", "run_role"}, (
            f"found no producer of {role}: a test that cannot fail"
        )
        assert bool(seen & (CONSUMERS | {"run_role"})) == bool(RIGHTS[role].groups), role


def test_run_role_joins_the_roles_own_group_and_builds_its_own_producer() -> None:
    """What run_role() builds for the role it is given, read from its source as above."""
    tree = ast.parse((ROOT / "consumers" / "kafka" / "role.py").read_text())
    calls = {getattr(n.func, "id", ""): n for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert ast.unparse(calls["make_producer"].args[1]) == "role"
    consumer = calls["group_consumer"]
    assert [ast.unparse(a) for a in consumer.args[1:]] == ["role", "f'wakeful-{role}'"]


def test_a_state_dir_formatted_before_sasl_is_refused_saying_what_to_do(tmp_path: Path) -> None:
    settings = Settings.from_env({"WAKEFUL_HOME": str(tmp_path)})
    data = tmp_path / "kafka" / "data"
    data.mkdir(parents=True)
    (data / "meta.properties").write_text("node.id=1\n")  # formatted, by a broker without logins
    admin = {"username": "wakeful-admin", "password": "pw"}
    with pytest.raises(StackError) as refused:
        kafka._format_storage(settings, tmp_path, tmp_path / "server.properties", admin, lambda _: None)
    message = str(refused.value)
    assert "\n" not in message and "before the broker required SASL logins" in message
    assert f"delete {tmp_path / 'kafka'}, then `wakeful dev up`" in message


def test_every_rule_is_an_allow_on_one_named_resource() -> None:
    for rule in all_acls():
        assert rule.resource_type in ("topic", "group")
        assert rule.operation in ("read", "write", "describe_configs")
        assert "*" not in rule.name and rule.principal.startswith("User:wakeful-")


def test_admin_kafka_acl_prints_every_principal_and_rule_of_the_table() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "wakeful.cli.main", "admin", "kafka-acl"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    for role in (role for role in RIGHTS if role != ADMIN):
        assert f"user wakeful-{role} " in shown.stdout
    for rule in RIGHTS["gate"].writes:
        assert str(Acl(principal("gate"), "topic", rule, "write")) in shown.stdout
