"""The single KRaft node's server.properties: who may log in on which listener, and how.

Two listeners, both authenticated:

    CLIENT      SASL_PLAINTEXT, SCRAM-SHA-256/512. Every client, and the broker's own inter-broker
                traffic (as the admin). SCRAM users live in the cluster metadata: the admin's is
                written when the storage is formatted (`--add-scram`), every role's by the admin.
    CONTROLLER  SASL_PLAINTEXT, PLAIN, with exactly one user: the admin. The broker half of the node
                reaches its controller half here. SCRAM is not used on it: a controller would have
                to read its own metadata before it could check a SCRAM login (KAFKA-15513).

No listener admits ANONYMOUS. The StandardAuthorizer denies whatever no ACL allows
(`allow.everyone.if.no.acl.found=false`); the admin is the only super user.
"""

from __future__ import annotations

import hashlib
import hmac

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

# What a single node needs instead of the defaults, which assume three brokers or more.
SINGLE_NODE = (
    # wakeful creates its topics on purpose; a typo must not silently make a new one.
    "auto.create.topics.enable=false",
    "offsets.topic.replication.factor=1",
    # 50 internal partitions cost seconds at first group join on a 2-core machine.
    "offsets.topic.num.partitions=6",
    "transaction.state.log.replication.factor=1",
    "transaction.state.log.min.isr=1",
    "transaction.state.log.num.partitions=6",
    "share.coordinator.state.topic.replication.factor=1",
    "share.coordinator.state.topic.min.isr=1",
    "group.initial.rebalance.delay.ms=0",
    "num.network.threads=2",
    "num.io.threads=4",
    # The controller writes a no-op record to its metadata log when it has written nothing for
    # this long, so that brokers elsewhere can tell it is alive. One node has no one to tell, and
    # at the default 500 ms those records were half of an idle broker's CPU (D78).
    "metadata.max.idle.interval.ms=10000",
    # The group protocols wakeful's consumers speak (D41); without share groups and streams groups
    # their coordinators' timers stop, a third of an idle broker's CPU (D78).
    "group.coordinator.rebalance.protocols=classic,consumer",
    # The log cleaner takes its dedupe buffer on the heap at start and holds it for the broker's
    # life. Kafka's default, 128 MiB, was most of the live heap (150 of 160 MB), so G1 marked it
    # again every few seconds under load, and a collector without a concurrent pass would stop for
    # it (D81). 16 MiB maps about 600,000 keys a cleaning pass; the compacted topics here (the
    # group offsets, wakeful.authority) hold far fewer, and more would take passes, not fail.
    "log.cleaner.dedupe.buffer.size=16777216",
)

# Groups that speak KIP-848 (WAKEFUL_KAFKA_GROUP_PROTOCOL=consumer; docs/decisions.md D41) take
# their timing from the broker, whose defaults (5 s heartbeats, 45 s sessions, and minimums at both)
# suit large fleets. New assignments ride on heartbeats, so a second between them, as the classic
# clients use; a member that died without leaving holds its partitions for its session, which
# these make 10 s. Classic groups ignore all four.
CONSUMER_GROUPS = (
    "group.consumer.min.heartbeat.interval.ms=1000",
    "group.consumer.heartbeat.interval.ms=1000",
    "group.consumer.min.session.timeout.ms=6000",
    "group.consumer.session.timeout.ms=10000",
)


def listeners(
    port: int, controller_port: int, host: str = "127.0.0.1", advertised: str | None = None
) -> list[str]:
    """`host` "" listens on every interface (in a container); `advertised` is the name clients use."""
    return [
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@{advertised or host}:{controller_port}",
        f"listeners=CLIENT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        f"advertised.listeners=CLIENT://{advertised or host}:{port}",
        "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=CLIENT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "inter.broker.listener.name=CLIENT",
    ]


def scram_login(user: str, password: str) -> str:
    """The JAAS line a Java client (or the broker itself) logs in with by SCRAM."""
    login = f'username="{user}" password="{password}"'
    return f"org.apache.kafka.common.security.scram.ScramLoginModule required {login};"


def security(admin_user: str, admin_password: str) -> list[str]:
    """SCRAM on the client listener, PLAIN for the admin alone on the controller listener, ACLs on."""
    login = f'username="{admin_user}" password="{admin_password}"'
    scram = scram_login(admin_user, admin_password)
    # user_<name>="<password>" is the controller's whole user list.
    plain = (
        f"org.apache.kafka.common.security.plain.PlainLoginModule required {login} "
        f'user_{admin_user}="{admin_password}";'
    )
    return [
        f"sasl.enabled.mechanisms={','.join(SCRAM_MECHANISMS)}",
        f"listener.name.client.sasl.enabled.mechanisms={','.join(SCRAM_MECHANISMS)}",
        "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-256",
        *(f"listener.name.client.{m.lower()}.sasl.jaas.config={scram}" for m in SCRAM_MECHANISMS),
        "listener.name.controller.sasl.enabled.mechanisms=PLAIN",
        "sasl.mechanism.controller.protocol=PLAIN",
        f"listener.name.controller.plain.sasl.jaas.config={plain}",
        f"authorizer.class.name={AUTHORIZER}",
        "allow.everyone.if.no.acl.found=false",
        f"super.users=User:{admin_user}",
    ]


def tokens(admin_password: str) -> list[str]:
    """Delegation tokens on (the Kafka credential provider mints one per step, D123): the broker's
    key for their HMACs, derived from the admin's password so that it lives in no file of its own
    (a new admin password ends every token, which live minutes), and expired tokens looked for
    every second instead of every hour, so an expired one is gone at once."""
    key = hmac.new(admin_password.encode(), b"wakeful delegation-token key", hashlib.sha256).hexdigest()
    return [f"delegation.token.secret.key={key}", "delegation.token.expiry.check.interval.ms=1000"]


def add_scram(admin_user: str, admin_password: str) -> list[str]:
    """`kafka-storage format` arguments that put the admin's SCRAM credentials in the new metadata."""
    args: list[str] = []
    for mechanism in SCRAM_MECHANISMS:
        args += ["--add-scram", f"{mechanism}=[name={admin_user},password={admin_password}]"]
    return args
