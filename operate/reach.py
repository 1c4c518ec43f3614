"""Whether a command's servers are there, said in one line with the fix, before any client waits
on a time-out: every operator command and the local stack's own start-up ask here first."""

from __future__ import annotations

import redis

from wakeful.core import process, secrets
from wakeful.core.errors import ServerUnavailable, StackError
from wakeful.core.settings import Settings
from wakeful.state import credentials


def healthy(url: str, timeout: float = 1.0) -> bool:
    """The server answers PING (NOAUTH counts: it answered, and it refuses strangers)."""
    try:
        client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        return bool(client.ping())
    except redis.AuthenticationError:
        return True
    except redis.ResponseError as exc:
        return str(exc).startswith("NOAUTH")
    except redis.RedisError:
        return False


START_HINT = "start it with `wakeful dev up` (`wakeful demo`, `bench` and `chaos` start it themselves)"


def require_redis(settings: Settings) -> None:
    """Fail in one line, saying how to fix it, when a command's Redis is not there to log in to."""
    if not healthy(settings.redis_url):
        hint = (
            f"The local stack is not running: {START_HINT}."
            if settings.runs_local_redis
            else "Check WAKEFUL_REDIS_URL and that the server is up."
        )
        raise ServerUnavailable("redis", settings.redis_address, hint)
    admin = secrets.path(settings, "admin", credentials.NAME)
    if settings.runs_local_redis and not admin.exists():
        old = credentials.old_file(settings)
        fix = (
            f"run `wakeful dev up` once to move the passwords of {old} into one folder per role"
            if old.exists()
            else f"this state dir was never set up; {START_HINT}"
        )
        raise StackError("redis", f"it answers at {settings.redis_address}, but {admin} is missing: {fix}")


def require_kafka(settings: Settings) -> None:
    """The same for Kafka: a port check, so a stopped broker costs no client time-out."""
    host, _, port = settings.kafka_bootstrap.split(",", maxsplit=1)[0].strip().rpartition(":")
    if process.port_open(host, int(port)):
        return
    hint = (
        f"The local stack is not running: {START_HINT}."
        if settings.runs_local_kafka
        else "Check WAKEFUL_KAFKA_BOOTSTRAP and that the broker is up."
    )
    raise ServerUnavailable("kafka", settings.kafka_bootstrap, hint)
