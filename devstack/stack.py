"""`wakeful dev up | down | status`: the local stack as one unit.

Servers named by WAKEFUL_KAFKA_BOOTSTRAP / WAKEFUL_REDIS_URL are used as they are; only the
missing ones are started here, and `down` stops only what `up` started (by pid file).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from wakeful.authority import signer_reseal, signer_seal
from wakeful.core import process, provenance, topics
from wakeful.core.settings import Settings
from wakeful.devstack import kafka, redis_cluster, redis_server
from wakeful.operate import kafka_acl, reach
from wakeful.operate import topics as topic_admin
from wakeful.state import acl, credentials, downstreams
from wakeful.state.seal import Keyring


@dataclass(frozen=True)
class ServerStatus:
    name: str
    address: str
    managed: str  # "local" (started by wakeful) or "external"
    pid: int | None
    healthy: bool

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def up(settings: Settings, say: process.Say) -> list[ServerStatus]:
    settings.home.mkdir(mode=0o700, parents=True, exist_ok=True)
    private(settings, say)  # also what an earlier release left readable
    if not settings.keyring.exists():
        Keyring.generate().save(settings.keyring)
        say(f"created the sealing keyring {settings.keyring} (mode 0600)")
    moved = credentials.migrate(settings)
    if moved:
        say(moved)
    made = provenance.ensure_keys(settings)
    if made:
        say(f"created role signing keys for {', '.join(made)} in {settings.secrets}")
    signer_seal.ensure(settings)  # the seal of HMAC signer secrets, for the roles that verify them
    if settings.runs_local_redis and settings.redis_cluster:
        redis_cluster.start(settings, say)
        say("workers, tests and every other command reach it with WAKEFUL_REDIS_CLUSTER=1 set")
    elif settings.runs_local_redis:
        redis_server.start(settings, say)
    else:
        say(f"redis: using {settings.redis_address} (WAKEFUL_REDIS_URL); nothing started")
    reseal_signers(settings, say)
    if settings.runs_local_kafka:
        kafka.start(settings, say)
        kafka_acl.apply(settings, say)  # every role's SCRAM user and ACLs, as core/kafka_rights.py says
    else:
        say(
            f"kafka: using {settings.kafka_bootstrap} (WAKEFUL_KAFKA_BOOTSTRAP); nothing started "
            "(`wakeful admin kafka-acl --apply` sets its users and ACLs)"
        )
    written = [t for d in downstreams.kafka(settings.downstreams) for t in d.writes]  # D123
    created = topic_admin.ensure_topics(settings, names=[*topics.ALL, *written])
    if created:
        say(f"created topics: {', '.join(created)} ({settings.partitions} partitions each)")
    private(settings, say)  # what was written beside the servers as they started
    return status(settings)


def reseal_signers(settings: Settings, say: process.Say) -> None:
    """Seal the HMAC secrets a registry of the release before holds whole (D91), as the admin."""
    seal = signer_seal.load(settings, signer_seal.KEEPER)
    done, unopened = signer_reseal.reseal(acl.connect(settings, "admin"), seal)
    if done:
        say(f"sealed {done} HMAC signer secret(s) in the signer registry under seal key {seal.active}")
    if unopened:
        say(
            f"cannot open the sealed secret of {', '.join(unopened)} with {signer_seal.NAME}.json: restore it"
        )


# What wakeful writes in its state dir. Only these are made private, and the folder itself when it
# holds nothing else: a state dir that is also a user's own folder keeps its other files as they are.
OWN = ("kafka", "redis", "redis-cluster", "secrets", "signers", "keyring.json", "workers.lock")


def private(settings: Settings, say: process.Say) -> None:
    """Take the group and other bits off everything wakeful keeps, whatever the umask: the servers'
    data holds signed events and ledger keys, past every login and ACL."""
    home = settings.home
    refused: list[str] = []
    if all(p.name in OWN for p in home.iterdir()):
        refused += _private(home, walk=False)
    for path in (*(home / name for name in OWN), settings.keyring, settings.secrets):
        refused += _private(path)
    if refused:
        say(f"could not make private (another user's files?): {', '.join(refused[:5])}")


def _private(path: Path, walk: bool = True) -> list[str]:
    """0700 for a folder (and, walked, all it holds), the owner's bits only for a file."""
    if path.is_dir() and not path.is_symlink() and walk:
        return process.private_tree(path)
    try:
        if path.exists() and not path.is_symlink():
            path.chmod(0o700 if path.is_dir() else path.stat().st_mode & 0o700)
    except PermissionError:
        return [str(path)]
    return []


def down(settings: Settings, say: process.Say) -> None:
    for name, stop in (("kafka", kafka.stop), ("redis", redis_server.stop)):
        pid = stop(settings)
        say(f"{name}: stopped pid {pid}" if pid else f"{name}: not running here")
    # The local cluster's nodes too, whether or not this command was told of the cluster.
    nodes = redis_cluster.stop(settings)
    if nodes or settings.redis_cluster:
        shown = ", ".join(map(str, nodes))
        say(f"redis-cluster: stopped pids {shown}" if nodes else "redis-cluster: not running here")


def status(settings: Settings) -> list[ServerStatus]:
    kafka_pid = process.running_pid(kafka.pid_path(settings), kafka.is_ours(settings))
    redis_pid = process.running_pid(redis_server.pid_path(settings), redis_server.is_ours(settings))
    if settings.redis_cluster:
        node_pids = redis_cluster.pids(settings)
        ports = ",".join(map(str, settings.redis_cluster_ports))
        redis_row = ServerStatus(
            name="redis-cluster",
            address=settings.redis_address if not settings.runs_local_redis else f"redis://127.0.0.1:{ports}",
            managed="local" if settings.runs_local_redis else "external",
            pid=node_pids[0] if settings.runs_local_redis else None,
            healthy=redis_cluster.healthy(settings)
            if settings.runs_local_redis
            else reach.healthy(settings.redis_url),
        )
        return [_kafka_row(settings, kafka_pid), redis_row]
    return [
        _kafka_row(settings, kafka_pid),
        ServerStatus(
            name="redis",
            address=settings.redis_address,
            managed="local" if settings.runs_local_redis else "external",
            pid=redis_pid,
            healthy=reach.healthy(settings.redis_url),
        ),
    ]


def _kafka_row(settings: Settings, pid: int | None) -> ServerStatus:
    return ServerStatus(
        name="kafka",
        address=settings.kafka_bootstrap,
        managed="local" if settings.runs_local_kafka else "external",
        pid=pid,
        healthy=kafka.healthy(settings),
    )
