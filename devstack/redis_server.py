"""The local Redis server: Debian's redis-server on loopback, append-only with fsync every second,
with a memory limit and no eviction (docs/decisions.md D28). Every start (re)loads the role users
and wakeful's function library as the admin user (docs/decisions.md D31)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import psutil
import redis

from wakeful.core import process
from wakeful.core.errors import StackError
from wakeful.core.settings import Settings
from wakeful.operate import reach
from wakeful.state import acl, credentials, library, upgrades

NAME = "redis"
INSTALL_HINT = "install it with `sudo apt-get install -y redis-server`"
# A stream node's size in bytes (Redis allocates a new node at it): small, since most streams here
# hold one entry or none (a task's counter, a drained outbox). docs/scale-out.md has the figures.
STREAM_NODE_MAX_BYTES = 512


def _dir(settings: Settings) -> Path:
    return settings.home / "redis"


def pid_path(settings: Settings) -> Path:
    return _dir(settings) / "redis.pid"


def log_path(settings: Settings) -> Path:
    return _dir(settings) / "redis.log"


def is_ours(settings: Settings) -> process.Predicate:
    # redis-server rewrites its process title, so recognise it by name and working directory.
    home = _dir(settings)

    def check(proc: psutil.Process) -> bool:
        return proc.name().startswith("redis-server") and Path(proc.cwd()) == home

    return check


def binary(say: process.Say) -> str:
    """Path of redis-server, installing Debian's package when it is missing and we are root."""
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    )
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise StackError(NAME, f"redis-server is not installed: {INSTALL_HINT}")
    say("redis-server is missing; installing Debian's package ...")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "redis-server"]):
        result = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if result.returncode != 0:
            raise StackError(
                NAME, f"`{' '.join(argv)}` failed: {INSTALL_HINT}", result.stdout + result.stderr
            )
    return "/usr/bin/redis-server"


def _write_config(settings: Settings) -> Path:
    home = _dir(settings)
    home.mkdir(parents=True, exist_ok=True)
    conf = home / "redis.conf"
    lines = config_lines(settings, settings.redis_port, home, log_path(settings), acl_path(settings))
    conf.write_text("\n".join([*lines, ""]))
    return conf


def config_lines(settings: Settings, port: int, home: Path, logfile: Path, aclfile: Path) -> list[str]:
    """redis.conf for a local server on `port` keeping its files in `home` (the cluster's nodes add
    their cluster lines to these)."""
    return [
        "bind 127.0.0.1",
        f"port {port}",
        "protected-mode yes",
        "daemonize no",
        f"dir {home}",
        f"logfile {logfile}",
        # Durability: a restart loses at most about one second of writes.
        "appendonly yes",
        "appendfsync everysec",
        'save ""',
        # Bounded memory, and state is never evicted: a full Redis refuses writes (OOM),
        # which the roles retry as transient, instead of silently dropping a waiting task.
        f"maxmemory {settings.redis_maxmemory}",
        "maxmemory-policy noeviction",
        # Every task keeps small streams (its counter, its drained outbox): a new stream node is
        # allocated at this size, so the default 4096 made a closed task's counter alone 4.7 KB (D73).
        f"stream-node-max-bytes {STREAM_NODE_MAX_BYTES}",
        # One ACL user per role (state.acl); `dev up` rewrites this file and reloads it.
        f"aclfile {aclfile}",
    ]


def acl_path(settings: Settings) -> Path:
    return _dir(settings) / "users.acl"


def write_acl(settings: Settings) -> dict[str, str]:
    """Write the role users (credentials are made once and kept); returns role -> password."""
    creds = credentials.ensure_all(settings)
    _dir(settings).mkdir(parents=True, exist_ok=True)
    acl_path(settings).write_text("\n".join(acl.aclfile_lines(creds, acl.users(settings))) + "\n")
    os.chmod(acl_path(settings), 0o600)
    return creds


def admin_client(settings: Settings) -> redis.Redis:
    return acl.connect(settings, "admin")


def start(settings: Settings, say: process.Say) -> int:
    pid = process.running_pid(pid_path(settings), is_ours(settings))
    if pid is not None:
        write_acl(settings)
        admin = admin_client(settings)
        # A server started by older code, or with another WAKEFUL_REDIS_MAXMEMORY, gets the limit now.
        admin.config_set("maxmemory", settings.redis_maxmemory)
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("stream-node-max-bytes", STREAM_NODE_MAX_BYTES)
        library.load(admin, settings)
        for line in upgrades.run(admin):
            say(line)
        # Last on this connection: ACL LOAD closes the connections of the users it replaces, the
        # caller's own included, so a command sent after it on the same socket may meet a reset.
        admin.acl_load()
        admin.close()
        _write_config(settings)
        say(
            f"redis already running (pid {pid}) on 127.0.0.1:{settings.redis_port}; ACL users and function "
            f"library {library.LIBRARY} reloaded, maxmemory {settings.redis_maxmemory}"
        )
        return pid
    if process.port_in_use(settings.redis_port):
        raise StackError(
            NAME,
            f"port {settings.redis_port} is taken by a process wakeful did not start; "
            "stop it or set WAKEFUL_REDIS_PORT",
        )
    exe = binary(say)
    conf = _write_config(settings)
    write_acl(settings)
    say(
        f"starting redis on 127.0.0.1:{settings.redis_port} "
        f"(AOF, fsync every second, maxmemory {settings.redis_maxmemory}, noeviction) ..."
    )
    pid = process.start_detached(
        [exe, str(conf)], _dir(settings) / "stdout.log", pid_path(settings), _dir(settings)
    )

    def ready() -> bool:
        if not process.alive(pid):
            raise StackError(
                NAME, "redis-server exited during start-up", process.log_tail(log_path(settings))
            )
        return reach.healthy(settings.redis_url)

    if not process.wait_until(ready, settings.start_timeout):
        process.stop(pid_path(settings), is_ours(settings))
        raise StackError(
            NAME,
            f"not ready after {settings.start_timeout:.0f}s",
            process.log_tail(log_path(settings)),
        )
    # Also on a restart: the AOF brings the library back, and a newer build replaces it here.
    admin = admin_client(settings)
    if not process.wait_until(lambda: _loaded(admin), settings.start_timeout):
        raise StackError(NAME, "still loading its data", process.log_tail(log_path(settings)))
    library.load(admin, settings)
    for line in upgrades.run(admin):
        say(line)
    admin.close()
    say(f"loaded the function library {library.LIBRARY} as the admin user")
    return pid


def _loaded(admin: redis.Redis) -> bool:
    """The server has finished loading its AOF (until then it answers LOADING)."""
    try:
        return bool(admin.ping())
    except redis.BusyLoadingError:
        return False


def stop(settings: Settings) -> int | None:
    return process.stop(pid_path(settings), is_ours(settings))
