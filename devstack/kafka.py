"""The local Apache Kafka broker: one KRaft node (broker and controller combined) on 127.0.0.1.

It admits only SCRAM logins, and authorizes each principal by ACL (kafka_props.py says how); the
admin's credential is written into the storage when it is formatted (docs/decisions.md D30).

Its jars come from Maven Central through the pinned build file `kafka-pom.xml` beside this module,
resolved once into WAKEFUL_CACHE and shared by every state dir.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import uuid
from importlib import resources
from pathlib import Path

import psutil
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from wakeful.core import kafka_auth, process, secrets
from wakeful.core.errors import ConfigError, StackError
from wakeful.core.kafka_rights import ADMIN
from wakeful.core.log import librdkafka_config
from wakeful.core.settings import Settings
from wakeful.devstack import kafka_props

NAME = "kafka"
INSTALL_HINT = "install a Java 17+ runtime and Maven, e.g. `apt-get install -y openjdk-17-jre-headless maven`"


def pom_text() -> str:
    return resources.files("wakeful.devstack").joinpath("kafka-pom.xml").read_text()


def libs_dir(settings: Settings) -> Path:
    digest = hashlib.sha256(pom_text().encode()).hexdigest()[:12]
    return settings.cache / f"kafka-{digest}" / "libs"


def ensure_jars(settings: Settings, say: process.Say) -> Path:
    """Resolve the broker's jars with Maven unless this exact pom was resolved before."""
    libs = libs_dir(settings)
    done = libs.parent / "complete"
    if done.exists():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None or shutil.which("java") is None:
        raise StackError(NAME, f"Java or Maven is missing: {INSTALL_HINT}")
    libs.parent.mkdir(parents=True, exist_ok=True)
    pom = libs.parent / "pom.xml"
    pom.write_text(pom_text())
    say(f"resolving the Kafka jars from Maven Central into {libs} (once) ...")
    result = subprocess.run(
        [
            mvn,
            "-q",
            "-B",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={libs}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
        raise StackError(NAME, "Maven could not resolve the Kafka jars", tail)
    done.write_text("ok\n")
    return libs


def _dir(settings: Settings) -> Path:
    return settings.home / "kafka"


def pid_path(settings: Settings) -> Path:
    return _dir(settings) / "kafka.pid"


def log_path(settings: Settings) -> Path:
    return _dir(settings) / "server.log"


def _marker(settings: Settings) -> str:
    return f"-Dwakeful.home={settings.home}"


def is_ours(settings: Settings) -> process.Predicate:
    marker = _marker(settings)

    def check(proc: psutil.Process) -> bool:
        return marker in proc.cmdline()

    return check


def _write_config(settings: Settings, admin: dict[str, str]) -> Path:
    base = _dir(settings)
    data = base / "data"
    data.mkdir(parents=True, exist_ok=True)
    props = base / "server.properties"
    lines = [
        *kafka_props.listeners(settings.kafka_port, settings.kafka_controller_port),
        *kafka_props.security(admin["username"], admin["password"]),
        *kafka_props.tokens(admin["password"]),
        f"log.dirs={data}",
        f"num.partitions={settings.partitions}",
        *kafka_props.SINGLE_NODE,
        *kafka_props.CONSUMER_GROUPS,
        "",
    ]
    # It holds the admin password (the broker logs in to itself with it): the owner's eyes only.
    fd = os.open(props, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines))
    log4j = base / "log4j2.properties"
    log4j.write_text(
        "\n".join(
            [
                "status = warn",
                "appender.file.type = RollingFile",
                "appender.file.name = file",
                f"appender.file.fileName = {log_path(settings)}",
                f"appender.file.filePattern = {base}/server.log.%i",
                "appender.file.layout.type = PatternLayout",
                "appender.file.layout.pattern = [%d] %p %m (%c)%n",
                "appender.file.policies.type = Policies",
                "appender.file.policies.size.type = SizeBasedTriggeringPolicy",
                "appender.file.policies.size.size = 20MB",
                "appender.file.strategy.type = DefaultRolloverStrategy",
                "appender.file.strategy.max = 3",
                "rootLogger.level = INFO",
                "rootLogger.appenderRef.file.ref = file",
                "",
            ]
        )
    )
    return props


def _cluster_id() -> str:
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):  # a leading dash would read as a flag
            return cid


def _sasl_marker(settings: Settings) -> Path:
    return _dir(settings) / "sasl-admin.sha256"


def _admin_digest(admin: dict[str, str]) -> str:
    return hashlib.sha256(f"{admin['username']}:{admin['password']}".encode()).hexdigest()


def _format_storage(
    settings: Settings, libs: Path, props: Path, admin: dict[str, str], say: process.Say
) -> None:
    """Format once, with the admin's SCRAM credentials in the bootstrap metadata: the one way into
    a broker that admits nobody else. A state dir formatted before that is refused, not patched."""
    marker = _sasl_marker(settings)
    if (_dir(settings) / "data" / "meta.properties").exists():
        if not marker.exists():
            raise StackError(
                NAME,
                f"{_dir(settings)} was formatted before the broker required SASL logins and has no admin "
                f"user: run `wakeful dev down`, delete {_dir(settings)}, then `wakeful dev up` "
                "(its topics start empty)",
            )
        if marker.read_text().strip() != _admin_digest(admin):
            raise StackError(
                NAME,
                f"the admin credential in {secrets.path(settings, ADMIN, kafka_auth.SECRET)} is not the one "
                f"{_dir(settings)} was formatted with: restore that file, or delete {_dir(settings)} "
                "and run `wakeful dev up` again",
            )
        return
    say("formatting the KRaft storage with the admin's SCRAM credentials (first start) ...")
    result = subprocess.run(
        [
            "java",
            "-cp",
            f"{libs}/*",
            "kafka.tools.StorageTool",
            "format",
            "-t",
            _cluster_id(),
            "-c",
            str(props),
            *kafka_props.add_scram(admin["username"], admin["password"]),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise StackError(NAME, "formatting the KRaft storage failed", result.stdout + result.stderr)
    marker.write_text(_admin_digest(admin) + "\n")


def healthy(settings: Settings, timeout: float = 2.0) -> bool:
    """Answers metadata to the admin; a closed port is checked first so a down broker costs no
    client noise. Without the admin's credential there is no way to ask: not healthy."""
    host, _, port = settings.kafka_bootstrap.split(",", maxsplit=1)[0].strip().rpartition(":")
    if not process.port_open(host, int(port)):
        return False
    try:
        config = kafka_auth.client_config(settings, ADMIN)
    except ConfigError:
        return False
    admin = AdminClient(config | librdkafka_config())
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException:
        return False
    finally:
        admin.poll(0)  # an AdminClient's log lines are written only when it is polled
    return bool(metadata.brokers)


def start(settings: Settings, say: process.Say) -> int:
    """Start the broker unless it runs already; returns its pid once it answers metadata."""
    pid = process.running_pid(pid_path(settings), is_ours(settings))
    if pid is not None:
        say(f"kafka already running (pid {pid}) on {settings.kafka_bootstrap}")
        return pid
    for port in (settings.kafka_port, settings.kafka_controller_port):
        if process.port_in_use(port):
            raise StackError(
                NAME,
                f"port {port} is taken by a process wakeful did not start; stop it or set "
                "WAKEFUL_KAFKA_PORT / WAKEFUL_KAFKA_CONTROLLER_PORT",
            )
    libs = ensure_jars(settings, say)
    admin = kafka_auth.ensure_credential(settings, ADMIN)
    props = _write_config(settings, admin)
    _format_storage(settings, libs, props, admin, say)
    heap = settings.kafka_heap
    argv = [
        "java",
        *jvm_flags(heap),
        f"-Dlog4j2.configurationFile={props.parent / 'log4j2.properties'}",
        _marker(settings),
        "-cp",
        f"{libs}/*",
        "kafka.Kafka",
        str(props),
    ]
    say(f"starting kafka on {settings.kafka_bootstrap} (heap {heap}) ...")
    pid = process.start_detached(argv, _dir(settings) / "stdout.log", pid_path(settings), _dir(settings))

    def ready() -> bool:
        if not process.alive(pid):
            raise StackError(NAME, "the broker exited during start-up", _start_logs(settings))
        return healthy(settings, timeout=1.0)

    if not process.wait_until(ready, settings.start_timeout, interval=0.5):
        process.stop(pid_path(settings), is_ours(settings))
        raise StackError(
            NAME,
            f"not ready after {settings.start_timeout:.0f}s (raise WAKEFUL_START_TIMEOUT on slow machines)",
            process.log_tail(log_path(settings)),
        )
    return pid


# The throughput collector, not G1 (D81): on a small box the broker's G1 barriers and concurrent
# threads cost about a quarter of its CPU per task at a trickle. What it costs: fewer, longer pauses
# (young ones 17 ms at the median and 85 at most here, against G1's 8 and 37), and no concurrent
# old-generation pass, so a full collection stops the broker while it marks the live heap (16-67 ms
# for the ones seen, at start-up). Compose's broker runs the same (compose/docker-compose.yml).
COLLECTOR = "-XX:+UseParallelGC"


def jvm_flags(heap: str) -> list[str]:
    """The broker JVM's flags: `heap` at most, half of it from the start, the collector above."""
    return [
        f"-Xmx{heap}",
        f"-Xms{max(64, megabytes(heap) // 2)}m",
        COLLECTOR,
        # Compiler threads that live as long as the broker, so `wakeful bench` can count what the
        # JIT spent (bench/box.py): a thread that ends takes its CPU time with it.
        "-XX:-UseDynamicNumberOfCompilerThreads",
        "-Djava.awt.headless=true",
    ]


def _start_logs(settings: Settings) -> str:
    """The broker's own log and its console: a JVM that dies before logging speaks only on the latter."""
    console = process.log_tail(_dir(settings) / "stdout.log", lines=15)
    return f"{process.log_tail(log_path(settings))}\n--- last lines of the broker's console ---\n{console}"


def stop(settings: Settings) -> int | None:
    return process.stop(pid_path(settings), is_ours(settings))


def megabytes(size: str) -> int:
    """A JVM size as WAKEFUL_KAFKA_HEAP allows it (512m, 1g), in MiB."""
    number, unit = int(size[:-1]), size[-1].lower()
    return number * 1024 if unit == "g" else number
