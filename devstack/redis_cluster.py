"""The local Redis Cluster (`wakeful dev up --redis-cluster`, WAKEFUL_REDIS_CLUSTER=1): three masters
of Debian's redis-server on loopback, ports WAKEFUL_REDIS_PORT+1..+3 (their cluster bus on each port
+ 10000), no replicas. Each node is configured like the single local Redis (devstack/redis_server.py:
AOF with fsync every second, a memory limit, no eviction) and has its own folder under
$WAKEFUL_HOME/redis-cluster/<port>, with its own copy of the role users' aclfile: ACL users are per
node in Redis Cluster, so every node is given all of them. The slots are assigned once, by
`redis-cli --cluster create`; a restart finds them in each node's nodes.conf. The function library
is loaded on every master (docs/decisions.md D40).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

import psutil
import redis

from wakeful.core import process, secrets
from wakeful.core.errors import StackError
from wakeful.core.settings import Settings
from wakeful.devstack import redis_server
from wakeful.state import acl, credentials, library, upgrades

NAME = "redis-cluster"
SLOTS = 16384


def _dir(settings: Settings, port: int) -> Path:
    return settings.home / "redis-cluster" / str(port)


def pid_path(settings: Settings, port: int) -> Path:
    return _dir(settings, port) / "redis.pid"


def log_path(settings: Settings, port: int) -> Path:
    return _dir(settings, port) / "redis.log"


def is_ours(settings: Settings, port: int) -> process.Predicate:
    home = _dir(settings, port)

    def check(proc: psutil.Process) -> bool:
        return proc.name().startswith("redis-server") and Path(proc.cwd()) == home

    return check


def _write_config(settings: Settings, port: int) -> Path:
    home = _dir(settings, port)
    home.mkdir(parents=True, exist_ok=True)
    conf = home / "redis.conf"
    lines = redis_server.config_lines(settings, port, home, log_path(settings, port), home / "users.acl")
    cluster = [
        "cluster-enabled yes",
        f"cluster-config-file {home / 'nodes.conf'}",
        "cluster-node-timeout 5000",
    ]
    conf.write_text("\n".join([*lines, *cluster, ""]))
    return conf


def _write_acl(settings: Settings, port: int) -> None:
    creds = credentials.ensure_all(settings)
    path = _dir(settings, port) / "users.acl"
    path.write_text("\n".join(acl.aclfile_lines(creds, acl.users(settings))) + "\n")
    os.chmod(path, 0o600)


def node_admin(settings: Settings, port: int, timeout: float = 2.0) -> redis.Redis:
    """The admin user on one node (a plain client: ACL LOAD and CLUSTER INFO are per node)."""
    doc = secrets.load(settings, "admin", credentials.NAME)
    return redis.Redis(
        host="127.0.0.1",
        port=port,
        username=doc["user"],
        password=doc["password"],
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
    )


def cluster_info(settings: Settings, port: int) -> dict[str, str]:
    """CLUSTER INFO of one node as a dict; {} when it does not answer."""
    try:
        with node_admin(settings, port) as node:
            raw = node.execute_command("CLUSTER INFO")
    except redis.RedisError:
        return {}
    if isinstance(raw, dict):  # redis-py parses it
        return {str(k): str(v) for k, v in raw.items()}
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def healthy(settings: Settings) -> bool:
    """Every node answers and says cluster_state:ok."""
    return all(
        cluster_info(settings, port).get("cluster_state") == "ok" for port in settings.redis_cluster_ports
    )


def pids(settings: Settings) -> list[int | None]:
    return [
        process.running_pid(pid_path(settings, p), is_ours(settings, p)) for p in settings.redis_cluster_ports
    ]


def start(settings: Settings, say: process.Say) -> list[int]:
    """Start the nodes that are not running, assign the slots if nobody has, wait for
    cluster_state:ok (at most WAKEFUL_START_TIMEOUT), then load the users and the function library."""
    exe = redis_server.binary(say)
    started = [_launch(settings, port, exe) for port in settings.redis_cluster_ports]
    for port, pid in zip(settings.redis_cluster_ports, started, strict=True):
        _wait_answers(settings, port, pid)
    first = settings.redis_cluster_ports[0]
    if int(cluster_info(settings, first).get("cluster_slots_assigned", "0")) < SLOTS:
        _create(settings, say)
    if not process.wait_until(lambda: healthy(settings), settings.start_timeout):
        raise StackError(
            NAME,
            f"cluster_state is not ok after {settings.start_timeout:.0f}s",
            process.log_tail(log_path(settings, first)),
        )
    admin = acl.connect(settings, "admin")
    library.load(admin, settings)  # FUNCTION LOAD goes to every master
    for line in upgrades.run(admin):
        say(line)
    admin.close()
    ports = ", ".join(map(str, settings.redis_cluster_ports))
    say(f"redis cluster ok on 127.0.0.1 ports {ports} (3 masters); users and {library.LIBRARY} on every node")
    return started


def start_node(settings: Settings, port: int, say: process.Say) -> int:
    """One more node on `port`, configured like the others (users, durability), answering but in
    no cluster yet: CLUSTER MEET (or `redis-cli --cluster add-node`) brings it in. Its pid."""
    pid = _launch(settings, port, redis_server.binary(say))
    _wait_answers(settings, port, pid)
    return pid


def stop_node(settings: Settings, port: int) -> int | None:
    """Stop the node start_node() started on `port`, and remove its folder."""
    stopped = process.stop(pid_path(settings, port), is_ours(settings, port))
    shutil.rmtree(_dir(settings, port), ignore_errors=True)
    return stopped


def _launch(settings: Settings, port: int, exe: str) -> int:
    """The node on `port` started (or found running, with this build's users loaded): its pid."""
    _write_config(settings, port)
    _write_acl(settings, port)
    pid = process.running_pid(pid_path(settings, port), is_ours(settings, port))
    if pid is not None:
        with node_admin(settings, port) as node:
            node.acl_load()  # the users of this build; it closes this connection's socket
        return pid
    if process.port_in_use(port) or process.port_in_use(port + 10000):
        raise StackError(
            NAME,
            f"port {port} or {port + 10000} is taken by a process wakeful did not start; "
            "stop it or set WAKEFUL_REDIS_PORT",
        )
    home = _dir(settings, port)
    return process.start_detached(
        [exe, str(home / "redis.conf")], home / "stdout.log", pid_path(settings, port), home
    )


def _wait_answers(settings: Settings, port: int, pid: int) -> None:
    if not process.wait_until(functools.partial(_answers, settings, port, pid), settings.start_timeout):
        raise StackError(
            NAME,
            f"node {port} not ready after {settings.start_timeout:.0f}s",
            process.log_tail(log_path(settings, port)),
        )


def _answers(settings: Settings, port: int, pid: int) -> bool:
    if not process.alive(pid):
        raise StackError(
            NAME, f"node {port} exited during start-up", process.log_tail(log_path(settings, port))
        )
    try:
        with node_admin(settings, port) as node:
            return bool(node.ping())
    except (redis.BusyLoadingError, redis.ConnectionError, redis.TimeoutError):
        return False


def _create(settings: Settings, say: process.Say) -> None:
    cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
    doc = secrets.load(settings, "admin", credentials.NAME)
    nodes = [f"127.0.0.1:{port}" for port in settings.redis_cluster_ports]
    argv = [
        cli,
        "--user",
        doc["user"],
        "--cluster",
        "create",
        *nodes,
        "--cluster-replicas",
        "0",
        "--cluster-yes",
    ]
    say(f"creating the cluster: {' '.join(argv[3:])}")
    # REDISCLI_AUTH: the password stays out of the process list.
    env = {**os.environ, "REDISCLI_AUTH": doc["password"]}
    result = subprocess.run(
        argv, capture_output=True, text=True, env=env, check=False, timeout=settings.start_timeout
    )
    if result.returncode != 0:
        raise StackError(NAME, "`redis-cli --cluster create` failed", result.stdout + result.stderr)


def stop(settings: Settings) -> list[int]:
    stopped = [
        process.stop(pid_path(settings, p), is_ours(settings, p)) for p in settings.redis_cluster_ports
    ]
    return [pid for pid in stopped if pid is not None]
