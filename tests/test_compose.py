"""compose/docker-compose.yml is valid and runs every consumer role as its own service."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from wakeful.consumers.supervisor import ROLES

COMPOSE = Path(__file__).resolve().parents[1] / "compose" / "docker-compose.yml"


def test_compose_file_names_every_role_kafka_kraft_and_redis_with_aof() -> None:
    doc = yaml.safe_load(COMPOSE.read_text())
    services = doc["services"]
    for role in ROLES:
        assert services[role]["command"] == ["worker", role]
    assert services["kafka"]["image"].startswith("apache/kafka:4.")
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert "--appendonly" in services["redis"]["command"]


def test_compose_client_accepts_the_file_where_one_is_installed() -> None:
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run([docker, "compose", "version"], capture_output=True, check=False).returncode == 0
    ):
        argv = [docker, "compose", "-f", str(COMPOSE), "config", "-q"]
    elif shutil.which("docker-compose"):
        argv = ["docker-compose", "-f", str(COMPOSE), "config", "-q"]
    else:
        # No compose client on this machine: the YAML structure test above still ran.
        return
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
