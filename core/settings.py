"""One settings object, built once from the environment at start-up and validated loudly.

Every knob is an environment variable so that workers, tests and CI agree without flags
($HOME below is WAKEFUL_HOME):

| variable                      | default                      | meaning                                     |
|-------------------------------|------------------------------|---------------------------------------------|
| WAKEFUL_HOME                  | ~/.local/state/wakeful       | state dir: server data, logs, pid files     |
| WAKEFUL_CACHE                 | ~/.cache/wakeful             | resolved Kafka jars, shared by state dirs   |
| WAKEFUL_KAFKA_BOOTSTRAP       | (unset: local stack)         | existing Kafka; nothing local is started    |
| WAKEFUL_KAFKA_SECURITY        | SASL_PLAINTEXT               | Kafka client protocol: SASL_PLAINTEXT, or   |
|                               |                              | SASL_SSL for a cluster of your own          |
| WAKEFUL_KAFKA_SASL_MECHANISM  | SCRAM-SHA-256                | SCRAM-SHA-256 or SCRAM-SHA-512              |
| WAKEFUL_KAFKA_CA              | (unset: system CAs)          | CA bundle to verify a SASL_SSL broker       |
| WAKEFUL_REDIS_URL             | (unset: local stack)         | existing Redis; nothing local is started    |
| WAKEFUL_KAFKA_PORT            | 19092                        | local broker listener                       |
| WAKEFUL_KAFKA_CONTROLLER_PORT | 19093                        | local KRaft controller listener             |
| WAKEFUL_REDIS_PORT            | 16379                        | local Redis port                            |
| WAKEFUL_REDIS_CLUSTER         | 0                            | 1: Redis is a Redis Cluster (roles use a    |
|                               |                              | cluster client; WAKEFUL_REDIS_URL names any |
|                               |                              | node). Local stack: 3 masters on ports      |
|                               |                              | REDIS_PORT+1..+3 (`dev up --redis-cluster`) |
| WAKEFUL_REDIS_MAXMEMORY       | 1gb                          | local Redis maxmemory (noeviction: full     |
|                               |                              | refuses writes, never drops a task)         |
| WAKEFUL_PARTITIONS            | 6                            | partitions per topic created by wakeful     |
| WAKEFUL_KAFKA_GROUP_PROTOCOL  | classic                      | consumer group protocol: classic, or        |
|                               |                              | consumer (KIP-848: the broker assigns; D41) |
| WAKEFUL_KAFKA_HEAP            | 512m                         | local broker -Xmx (and -Xms at half)        |
| WAKEFUL_KEYRING               | $HOME/keyring.json           | sealing keys (created by `dev up`)          |
| WAKEFUL_SECRETS               | $HOME/secrets                | one folder of secrets per role (its Redis   |
|                               |                              | password: <role>/redis.json)                |
| WAKEFUL_ALLOW_DEFAULT_USER    | 0                            | let roles run as Redis's default user       |
| WAKEFUL_EVENT_MAX_AGE         | 300                          | seconds an upstream event stays acceptable  |
| WAKEFUL_MODEL                 | rules                        | proposer model: rules, gullible or openai   |
| WAKEFUL_MODEL_URL             | (unset; openai needs it)     | chat-completions base URL, e.g.             |
|                               |                              | http://127.0.0.1:8000/v1                    |
| WAKEFUL_MODEL_NAME            | (unset; openai needs it)     | the model name the server knows             |
| WAKEFUL_MODEL_KEY_FILE        | (unset)                      | file holding the API key (else              |
|                               |                              | OPENAI_API_KEY; local servers need none)    |
| WAKEFUL_MODEL_TIMEOUT         | 30                           | seconds per model call                      |
| WAKEFUL_MODEL_ATTEMPTS        | 4                            | calls per proposal on 429/5xx/time-outs     |
| WAKEFUL_MODEL_TASK_TOKENS     | 200000                       | model tokens one task may use in all (0: no |
|                               |                              | limit); then it is parked for a person      |
| WAKEFUL_MODEL_TENANT_TOKENS   | 5000000                      | model tokens a tenant's tasks may use per   |
|                               |                              | UTC day (0: no limit)                       |
| WAKEFUL_APP                   | wakeful.examples.refund:app  | the app the roles drive (module:attribute); |
|                               |                              | the default is the bundled example app      |
| WAKEFUL_DOWNSTREAMS           | wakeful.examples.downstreams | the downstream systems the stack's Redis    |
|                               | :DOWNSTREAMS                 | hosts for local runs (users, Lua functions) |
| WAKEFUL_THREADS               | 16                           | handler threads per role process            |
| WAKEFUL_LEASE_TTL_MS          | 15000                        | a task lease lapses unless renewed (D61)    |
| WAKEFUL_INSTANCE_ID           | (unset)                      | stable consumer id: restarts resume at once |
| WAKEFUL_START_TIMEOUT         | 90                           | seconds to wait for a server to be ready    |
| WAKEFUL_LOG_LEVEL             | warning                      | lowest Kafka client log line written        |
| WAKEFUL_LOG_RETENTION_DAYS    | 0 (forever)                  | days wakeful.log keeps a record, when the   |
|                               |                              | topic is created (docs/retention.md)        |
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse, urlsplit

from pydantic import SecretStr

from wakeful.core.egress import parse_map
from wakeful.core.errors import ConfigError

_HEAP = re.compile(r"^[1-9][0-9]*[mMgG]$")
_MEMORY = re.compile(r"([1-9][0-9]*)(b|kb|mb|gb)")
_MEMORY_UNITS = {"b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3}
MIN_REDIS_MEMORY = 64 * 1024**2  # below this the roles' own keys and scripts barely fit
LOG_LEVELS = ("debug", "info", "warning", "error")
KAFKA_SECURITY = ("SASL_PLAINTEXT", "SASL_SSL")
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MODEL_CHOICES = ("rules", "gullible", "openai")
CLUSTER_MASTERS = 3  # masters of the local Redis Cluster
GROUP_PROTOCOLS = ("classic", "consumer")


@dataclass(frozen=True)
class Settings:
    """Where the servers are and how the local stack runs."""

    home: Path
    cache: Path
    kafka_bootstrap_external: str | None
    redis_url_external: str | None
    kafka_port: int
    kafka_controller_port: int
    redis_port: int
    partitions: int
    kafka_heap: str
    start_timeout: float
    keyring: Path
    allow_default_user: bool
    secrets: Path = Path("secrets")
    event_max_age: float = 300.0
    model: str = "rules"
    model_task_tokens: int = 200_000  # 0: no limit
    model_tenant_tokens: int = 5_000_000  # per tenant per UTC day; 0: no limit
    app: str | None = None  # module:attribute of the app the roles drive; None: the bundled example
    # module:attribute of the downstream systems the stack's Redis hosts (state/downstreams.py)
    downstreams: str = "wakeful.examples.downstreams:DOWNSTREAMS"
    # Where upstream systems reach the read door (`wakeful ingress`, wakeful.client).
    ingress_url: str = "http://127.0.0.1:18080"
    threads: int = 16
    lease_ttl_ms: int = 15_000
    instance_id: str | None = None
    log_level: str = "warning"
    redis_maxmemory: str = "1gb"
    kafka_security: str = "SASL_PLAINTEXT"
    kafka_sasl_mechanism: str = "SCRAM-SHA-256"
    kafka_ca: Path | None = None
    kafka_group_protocol: str = "classic"
    model_url: str | None = None  # the chat-completions base URL (model `openai`)
    model_name: str | None = None
    # SecretStr: the key shows as '**********' in any repr, so no log of the settings can carry it.
    model_key: SecretStr | None = None
    model_timeout: float = 30.0
    model_attempts: int = 4
    redis_cluster: bool = False  # Redis is a Redis Cluster (docs/decisions.md D40)
    log_retention_days: int = 0  # wakeful.log's retention.ms when created; 0: forever (D73)
    # wakeful.events' and wakeful.wake's retention.ms when created: the longest outage of a role
    # whose backlog is still read, its age judged on arrival (D84)
    events_retention_hours: int = 168
    sweep_s: int = 60  # how often the timer looks for tasks nothing will wake (D85)
    # How often the relay re-finds every outbox holding records, and puts its watermark on the log:
    # how far behind the log a recover's re-drive starts, at least (D87)
    outbox_sweep_s: int = 60
    # Where each egress name a tool declares lives: `name=host:port,...;name=...` (core/egress.py)
    egress: str = ""
    egress_mode: str = "enforce"  # or "report": the guard notes what it would refuse, stops nothing
    # The most a per-step credential lives if its step never says it ended (core/grants.py, D120)
    credential_ttl_s: int = 120

    @property
    def redis_cluster_ports(self) -> tuple[int, ...]:
        """The local cluster's node ports (its bus ports are these + 10000)."""
        return tuple(self.redis_port + n for n in range(1, CLUSTER_MASTERS + 1))

    @property
    def kafka_bootstrap(self) -> str:
        return self.kafka_bootstrap_external or f"127.0.0.1:{self.kafka_port}"

    @property
    def redis_url(self) -> str:
        if self.redis_url_external:
            return self.redis_url_external
        port = self.redis_cluster_ports[0] if self.redis_cluster else self.redis_port
        return f"redis://127.0.0.1:{port}/0"

    @property
    def redis_address(self) -> str:
        """The Redis URL without any credentials in it, for logs and status output."""
        parsed = urlparse(self.redis_url)
        host = parsed.hostname or ""
        return (
            f"{parsed.scheme}://{host}:{parsed.port or 6379}{parsed.path}" if host else parsed.scheme + "://"
        )

    @property
    def runs_local_kafka(self) -> bool:
        return self.kafka_bootstrap_external is None

    @property
    def runs_local_redis(self) -> bool:
        return self.redis_url_external is None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        home = Path(env.get("WAKEFUL_HOME") or Path.home() / ".local/state/wakeful")
        cache = Path(env.get("WAKEFUL_CACHE") or Path.home() / ".cache/wakeful")
        heap = env.get("WAKEFUL_KAFKA_HEAP", "512m")
        if not _HEAP.match(heap):
            raise ConfigError("WAKEFUL_KAFKA_HEAP", f"{heap!r} is not a JVM size such as 512m or 1g")
        ports = {
            name: _int(env, name, default, 1, 65535)
            for name, default in (
                ("WAKEFUL_KAFKA_PORT", 19092),
                ("WAKEFUL_KAFKA_CONTROLLER_PORT", 19093),
                ("WAKEFUL_REDIS_PORT", 16379),
            )
        }
        if env.get("WAKEFUL_REDIS_CREDENTIALS"):
            raise ConfigError(
                "WAKEFUL_REDIS_CREDENTIALS",
                "no longer read: each role's Redis password is in $WAKEFUL_SECRETS/<role>/redis.json. "
                "Unset it; `wakeful dev up` moves $WAKEFUL_HOME/redis-credentials.json there",
            )
        if len(set(ports.values())) != len(ports):
            raise ConfigError("WAKEFUL_*_PORT", f"ports must differ, got {ports}")
        cluster = _flag(env, "WAKEFUL_REDIS_CLUSTER")
        if cluster and not env.get("WAKEFUL_REDIS_URL"):
            nodes = range(ports["WAKEFUL_REDIS_PORT"] + 1, ports["WAKEFUL_REDIS_PORT"] + CLUSTER_MASTERS + 1)
            taken = [
                p for p in (ports["WAKEFUL_KAFKA_PORT"], ports["WAKEFUL_KAFKA_CONTROLLER_PORT"]) if p in nodes
            ]
            if taken or nodes[-1] > 65535 - 10000:
                raise ConfigError(
                    "WAKEFUL_REDIS_PORT",
                    f"the local Redis Cluster takes ports {nodes[0]}..{nodes[-1]} (and each + 10000 for "
                    "its bus); move WAKEFUL_REDIS_PORT or the Kafka ports so they do not meet",
                )
        bootstrap = _bootstrap(env.get("WAKEFUL_KAFKA_BOOTSTRAP"))
        security = _choice(env, "WAKEFUL_KAFKA_SECURITY", "SASL_PLAINTEXT", KAFKA_SECURITY)
        if bootstrap is None and security != "SASL_PLAINTEXT":
            raise ConfigError(
                "WAKEFUL_KAFKA_SECURITY",
                f"the local broker speaks SASL_PLAINTEXT on 127.0.0.1; {security} is for a cluster named "
                "by WAKEFUL_KAFKA_BOOTSTRAP",
            )
        ca = env.get("WAKEFUL_KAFKA_CA") or None
        model = _choice(env, "WAKEFUL_MODEL", "rules", MODEL_CHOICES)
        model_url = _model_url(env.get("WAKEFUL_MODEL_URL"))
        model_name = env.get("WAKEFUL_MODEL_NAME") or None
        if model == "openai" and model_url is None:
            raise ConfigError(
                "WAKEFUL_MODEL_URL",
                "WAKEFUL_MODEL=openai needs the server's chat-completions base URL, "
                "e.g. http://127.0.0.1:8000/v1 (docs/models.md)",
            )
        if model == "openai" and model_name is None:
            raise ConfigError(
                "WAKEFUL_MODEL_NAME", "WAKEFUL_MODEL=openai needs the name the server knows the model by"
            )
        return cls(
            home=home.expanduser().resolve(),
            cache=cache.expanduser().resolve(),
            kafka_bootstrap_external=bootstrap,
            redis_url_external=_redis_url(env.get("WAKEFUL_REDIS_URL")),
            kafka_port=ports["WAKEFUL_KAFKA_PORT"],
            kafka_controller_port=ports["WAKEFUL_KAFKA_CONTROLLER_PORT"],
            redis_port=ports["WAKEFUL_REDIS_PORT"],
            partitions=_int(env, "WAKEFUL_PARTITIONS", 6, 1, 1000),
            kafka_heap=heap,
            start_timeout=float(_int(env, "WAKEFUL_START_TIMEOUT", 90, 5, 3600)),
            keyring=Path(env.get("WAKEFUL_KEYRING") or home / "keyring.json").expanduser().resolve(),
            allow_default_user=_flag(env, "WAKEFUL_ALLOW_DEFAULT_USER"),
            secrets=Path(env.get("WAKEFUL_SECRETS") or home / "secrets").expanduser().resolve(),
            event_max_age=float(_int(env, "WAKEFUL_EVENT_MAX_AGE", 300, 1, 7 * 24 * 3600)),
            model=model,
            model_url=model_url,
            model_name=model_name,
            model_key=_model_key(env) if model == "openai" else None,
            model_timeout=float(_int(env, "WAKEFUL_MODEL_TIMEOUT", 30, 1, 600)),
            model_attempts=_int(env, "WAKEFUL_MODEL_ATTEMPTS", 4, 1, 10),
            model_task_tokens=_int(env, "WAKEFUL_MODEL_TASK_TOKENS", 200_000, 0, 10**12),
            model_tenant_tokens=_int(
                env, "WAKEFUL_MODEL_TENANT_TOKENS", 5_000_000, 0, 10**14 - 1
            ),  # state/budget.py DAY_SPAN
            app=env.get("WAKEFUL_APP") or None,
            downstreams=env.get("WAKEFUL_DOWNSTREAMS") or "wakeful.examples.downstreams:DOWNSTREAMS",
            ingress_url=_ingress_url(env.get("WAKEFUL_INGRESS_URL")),
            threads=_int(env, "WAKEFUL_THREADS", 16, 1, 256),
            lease_ttl_ms=_int(env, "WAKEFUL_LEASE_TTL_MS", 15_000, 100, 3_600_000),
            instance_id=env.get("WAKEFUL_INSTANCE_ID") or None,
            log_level=log_level_from(env),
            redis_maxmemory=_memory(env, "WAKEFUL_REDIS_MAXMEMORY", "1gb"),
            kafka_security=security,
            kafka_sasl_mechanism=_choice(
                env, "WAKEFUL_KAFKA_SASL_MECHANISM", "SCRAM-SHA-256", SCRAM_MECHANISMS
            ),
            kafka_ca=Path(ca).expanduser().resolve() if ca else None,
            redis_cluster=cluster,
            kafka_group_protocol=_choice(env, "WAKEFUL_KAFKA_GROUP_PROTOCOL", "classic", GROUP_PROTOCOLS),
            log_retention_days=_int(env, "WAKEFUL_LOG_RETENTION_DAYS", 0, 0, 100 * 365),
            events_retention_hours=_int(env, "WAKEFUL_EVENTS_RETENTION_HOURS", 168, 1, 100 * 365 * 24),
            sweep_s=_int(env, "WAKEFUL_SWEEP_S", 60, 1, 24 * 3600),
            outbox_sweep_s=_int(env, "WAKEFUL_OUTBOX_SWEEP_S", 60, 1, 3600),
            egress=_egress(env.get("WAKEFUL_EGRESS", "")),
            egress_mode=_choice(env, "WAKEFUL_EGRESS_MODE", "enforce", ("enforce", "report")),
            credential_ttl_s=_int(env, "WAKEFUL_CREDENTIAL_TTL_S", 120, 1, 900),
        )


def log_level_from(env: Mapping[str, str]) -> str:
    """WAKEFUL_LOG_LEVEL. core/log.py reads it through here too: Kafka clients are also built where
    no Settings object is at hand (the publisher SDK, ensure_topics)."""
    return _choice(env, "WAKEFUL_LOG_LEVEL", "warning", LOG_LEVELS)


def _int(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(name, f"{raw!r} is not a whole number") from None
    if not low <= value <= high:
        raise ConfigError(name, f"{value} is outside {low}..{high}")
    return value


def _choice(env: Mapping[str, str], name: str, default: str, allowed: tuple[str, ...]) -> str:
    raw = env.get(name) or default
    if raw not in allowed:
        raise ConfigError(name, f"{raw!r} is not one of {', '.join(allowed)}")
    return raw


def _memory(env: Mapping[str, str], name: str, default: str) -> str:
    """A Redis memory size such as 512mb or 1gb, at least MIN_REDIS_MEMORY; 0 (no limit) is refused."""
    raw = (env.get(name) or default).strip().lower()
    found = _MEMORY.fullmatch(raw)
    if found is None:
        raise ConfigError(name, f"{raw!r} is not a Redis memory size such as 512mb or 1gb")
    if int(found[1]) * _MEMORY_UNITS[found[2]] < MIN_REDIS_MEMORY:
        raise ConfigError(name, f"{raw} is below the {MIN_REDIS_MEMORY // 1024**2}mb minimum")
    return raw


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no"):
        return False
    if raw in ("1", "true", "yes"):
        return True
    raise ConfigError(name, f"{raw!r} is not 1/0, true/false or yes/no")


def _bootstrap(raw: str | None) -> str | None:
    if not raw:
        return None
    for part in raw.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ConfigError("WAKEFUL_KAFKA_BOOTSTRAP", f"{part!r} is not host:port")
    return raw


def _redis_url(raw: str | None) -> str | None:
    if not raw:
        return None
    parsed = urlparse(raw)
    if parsed.scheme not in ("redis", "rediss", "unix") or not (parsed.hostname or parsed.path):
        raise ConfigError("WAKEFUL_REDIS_URL", f"{raw!r} is not a redis:// or rediss:// URL")
    return raw


def _model_url(raw: str | None) -> str | None:
    if not raw:
        return None
    parsed = urlparse(raw)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigError("WAKEFUL_MODEL_URL", f"{raw!r} is not an http:// or https:// URL")
    if parsed.username or parsed.password:
        raise ConfigError(
            "WAKEFUL_MODEL_URL", "holds credentials; put the key in WAKEFUL_MODEL_KEY_FILE and drop it here"
        )
    return raw.rstrip("/")


def _model_key(env: Mapping[str, str]) -> SecretStr | None:
    """The model server's API key: WAKEFUL_MODEL_KEY_FILE, else OPENAI_API_KEY, else none (local
    servers need none). Never quoted in an error."""
    path = env.get("WAKEFUL_MODEL_KEY_FILE")
    if path:
        try:
            key = Path(path).expanduser().read_text().strip()
        except OSError as exc:
            raise ConfigError(
                "WAKEFUL_MODEL_KEY_FILE", f"cannot read {path}: {exc.strerror}; fix it or unset it"
            ) from None
        if not key:
            raise ConfigError("WAKEFUL_MODEL_KEY_FILE", f"{path} is empty; put the API key in it or unset it")
        return SecretStr(key)
    key = env.get("OPENAI_API_KEY", "").strip()
    return SecretStr(key) if key else None


def _ingress_url(raw: str | None) -> str:
    """WAKEFUL_INGRESS_URL: http(s)://host:port of the read door, no path."""
    if not raw:
        return Settings.ingress_url
    parsed = urlsplit(raw)
    if parsed.scheme not in ("http", "https") or not parsed.hostname or parsed.path not in ("", "/"):
        raise ConfigError("WAKEFUL_INGRESS_URL", f"{raw!r} is not http(s)://host[:port]")
    return raw.rstrip("/")


def _egress(text: str) -> str:
    """WAKEFUL_EGRESS, checked now: a malformed map stops the process that reads it, naming each problem."""
    parse_map(text)
    return text
