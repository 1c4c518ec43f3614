"""compose/docker-compose.yml as the tests read it: its services, their settings, mounts and
dependencies, and where on a named volume each file a service reads or writes lives; and the named
volumes as directories, into which the init service runs as compose runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from wakeful.authority import signer_seal
from wakeful.core import index_signing, kafka_rights, log_signing, provenance, secrets
from wakeful.core.settings import Settings
from wakeful.state import acl, credentials

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "compose" / "docker-compose.yml"
DOCKERFILE = ROOT / "compose" / "Dockerfile"

# A secret is "keyring" (the sealing keys); "redis:<user>" (that Redis user's password, in its
# role's own secrets folder; "redis:default" is in the admin's); "kafka:<principal>" (that Kafka
# user's password, in its own folder); "signing:<role>" (the key the role signs its output with,
# in its own folder); or "verifying:<role>" (a reader's copies of its senders' channel keys, in its
# own folder). A role that lacks the file stops with KeyringError, MissingCredential or a
# ConfigError naming the file (tests/test_compose.py makes the file as the local stack does).
SECRETS = (
    "keyring",
    *(
        f"redis:{user}" for user in (*acl.users(Settings.from_env({})), acl.DEFAULT)
    ),  # a static downstream user too (D125)
    *(f"kafka:{principal}" for principal in kafka_rights.ROLES),
    *(f"signing:{role}" for role in provenance.SIGNING_ROLES),
    *(f"verifying:{role}" for role in sorted(set(provenance.READERS.values()))),
    f"log-signing:{log_signing.SIGNER_ROLE}",  # the relay's Ed25519 key for wakeful.log (D72)
    *(f"{signer_seal.NAME}:{role}" for role in (*signer_seal.VERIFIERS, signer_seal.KEEPER)),  # D91
    f"index-signing:{index_signing.OWNER}",  # the relay's MAC key for the task index (D93)
    *(f"index-verifying:{reader}" for reader in index_signing.READERS),  # the readers' copies
)


def secret_path(settings: Settings, secret: str) -> Path:
    kind, _, user = secret.partition(":")
    if kind == "keyring":
        return settings.keyring
    if kind == "redis" and user == acl.DEFAULT:
        return secrets.path(settings, "admin", credentials.DEFAULT_NAME)
    if kind == "redis":
        return secrets.path(settings, user, credentials.NAME)
    return secrets.path(settings, user, kind)


@dataclass(frozen=True)
class Mount:
    volume: str
    target: PurePosixPath
    read_only: bool


@dataclass(frozen=True)
class Place:
    """A file on a named volume: the volume and the path inside it."""

    volume: str
    path: PurePosixPath
    read_only: bool


def load_compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return doc


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    assert isinstance(env, dict), "write environment as a mapping, so anchors can merge into it"
    return {key: str(value) for key, value in env.items()}


def mounts(doc: dict[str, Any], service: dict[str, Any]) -> list[Mount]:
    """The service's named-volume mounts (bind mounts are not volumes and are left out)."""
    found = []
    for entry in service.get("volumes") or []:
        if isinstance(entry, str):
            source, target, *options = entry.split(":")
            read_only = bool(options) and "ro" in options[0].split(",")
        else:
            source, target = entry["source"], entry["target"]
            read_only = bool(entry.get("read_only", False))
        if source in (doc.get("volumes") or {}):
            found.append(Mount(source, PurePosixPath(target), read_only))
    return found


def place(doc: dict[str, Any], service: dict[str, Any], path: str | Path) -> Place | None:
    """Where a path inside the service's container lives, if it is on a named volume."""
    inside = PurePosixPath(path)
    for mount in sorted(mounts(doc, service), key=lambda m: len(m.target.parts), reverse=True):
        if inside.is_relative_to(mount.target):
            return Place(mount.volume, inside.relative_to(mount.target), mount.read_only)
    return None


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    """Service name -> the condition it waits for."""
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: spec.get("condition", "service_started") for name, spec in deps.items()}


def service_settings(service: dict[str, Any]) -> Settings:
    return Settings.from_env(environment(service))


def service(doc: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] | None = doc["services"].get(name)
    assert found is not None, f"compose/docker-compose.yml has no {name} service"
    return found


def secret_place(doc: dict[str, Any], name: str, secret: str) -> Place | None:
    """Where the service's settings put the secret's file, if that is on a named volume."""
    return place(doc, service(doc, name), secret_path(service_settings(service(doc, name)), secret))


def redis_options(command: list[str]) -> dict[str, str]:
    assert command[0] == "redis-server"
    args = command[1:]
    return {args[i].removeprefix("--"): args[i + 1] for i in range(0, len(args) - 1, 2)}


def init_argv(doc: dict[str, Any]) -> list[str]:
    init = service(doc, "init")
    return [*(init.get("entrypoint") or []), *(init.get("command") or [])]


def init_aclfile(doc: dict[str, Any]) -> str:
    argv = init_argv(doc)
    assert "--aclfile" in argv, "init does not write Redis's users"
    return argv[argv.index("--aclfile") + 1]


class Volumes:
    """Named volumes as directories, and each service's filesystem as a directory in which every
    mount is a link to its volume, so a container path maps to the host as the engine would map it."""

    def __init__(self, doc: dict[str, Any], root: Path) -> None:
        self.doc, self.root = doc, root
        copied = re.search(r"^COPY\s+\.\s+(\S+)", DOCKERFILE.read_text(), re.MULTILINE)
        assert copied, "compose/Dockerfile no longer copies the project in"
        self.app = PurePosixPath(copied.group(1))

    def host(self, name: str, value: str) -> str:
        if not value.startswith("/"):
            return value
        if PurePosixPath(value).is_relative_to(self.app):
            return str(ROOT / PurePosixPath(value).relative_to(self.app))
        fs = self.root / "fs" / name
        for mount in sorted(mounts(self.doc, service(self.doc, name)), key=lambda m: len(m.target.parts)):
            volume = self.root / "volumes" / mount.volume
            volume.mkdir(parents=True, exist_ok=True)
            link = fs / mount.target.relative_to("/")
            if not link.is_symlink():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(volume, target_is_directory=True)
        return str(fs / PurePosixPath(value).relative_to("/"))

    def file(self, name: str, secret: str) -> Path:
        return Path(self.host(name, str(secret_path(service_settings(service(self.doc, name)), secret))))

    def env(self, name: str, **override: str) -> dict[str, str]:
        mapped = {k: self.host(name, v) for k, v in environment(service(self.doc, name)).items()}
        return {**mapped, **override}


def run_init(doc: dict[str, Any], volumes: Volumes, *extra: str) -> str:
    argv = [volumes.host("init", arg) for arg in init_argv(doc)]
    assert argv[0] == "python", f"init runs {argv[0]}, not the image's Python"
    base = {k: v for k, v in os.environ.items() if not k.startswith("WAKEFUL_")}
    result = subprocess.run(
        [sys.executable, *argv[1:], *extra],
        env={**base, **volumes.env("init")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout
