"""How every Kafka client wakeful builds logs in: as its role's SCRAM principal, never anonymously.

A role's password is made once and kept in `$WAKEFUL_SECRETS/<role>/kafka.json` (core/secrets.py),
`{"username": "wakeful-<role>", "password": ...}`; a role's process reads only its own. What the
principal may do is core/kafka_rights.py. `client_config` is the one place a confluent-kafka
client gets its security settings, `kafka_python_config` the same for kafka-python.
"""

from __future__ import annotations

import secrets as random
from typing import Any

from wakeful.core import secrets
from wakeful.core.errors import ConfigError, PermissionRefused
from wakeful.core.settings import Settings

SECRET = "kafka"
ADMIN = "admin"  # the super user: creates topics, SCRAM users and ACLs


def user_name(role: str) -> str:
    """The SCRAM user (and ACL principal `User:<name>`) of a role (core/kafka_rights.py)."""
    return f"wakeful-{role}"


def new_credential(role: str) -> dict[str, str]:
    return {"username": user_name(role), "password": random.token_urlsafe(24)}


def ensure_credential(settings: Settings, role: str) -> dict[str, str]:
    """The role's credential, made the first time (the local stack and the compose init service)."""
    return secrets.ensure(settings, role, SECRET, lambda: new_credential(role))


def credential(settings: Settings, role: str) -> dict[str, str]:
    """The role's credential as stored; a missing or incomplete file says how to make it."""
    if role == ADMIN and not settings.runs_local_kafka and not secrets.exists(settings, role, SECRET):
        # Nothing wakeful makes: the login of a super user of the operator's own cluster.
        raise ConfigError(
            str(secrets.path(settings, role, SECRET)),
            'missing: write {"username": ..., "password": ...} of a super user of the cluster at '
            f"{settings.kafka_bootstrap} there (mode 0600); docs/security.md",
        )
    doc = secrets.load(settings, role, SECRET)
    if not doc.get("username") or not doc.get("password"):
        raise ConfigError(
            str(secrets.path(settings, role, SECRET)), 'needs "username" and "password": restore or rotate it'
        )
    return doc


def client_config(settings: Settings, role: str) -> dict[str, Any]:
    """A confluent-kafka client's bootstrap and security settings, logged in as `role`."""
    cred = credential(settings, role)
    config: dict[str, Any] = {
        "bootstrap.servers": settings.kafka_bootstrap,
        "security.protocol": settings.kafka_security,
        "sasl.mechanism": settings.kafka_sasl_mechanism,
        "sasl.username": cred["username"],
        "sasl.password": cred["password"],
    }
    if settings.kafka_ca is not None:
        config["ssl.ca.location"] = str(settings.kafka_ca)
    return config


# The same settings under kafka-python's keyword names.
_KAFKA_PYTHON_NAMES = {
    "bootstrap.servers": "bootstrap_servers",
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
}


def kafka_python_config(settings: Settings, role: str) -> dict[str, Any]:
    """The same for a kafka-python client (its keyword arguments)."""
    return {_KAFKA_PYTHON_NAMES[name]: value for name, value in client_config(settings, role).items()}


def refused_credentials(settings: Settings, role: str, why: str) -> PermissionRefused:
    where = secrets.path(settings, role, SECRET)
    return PermissionRefused(
        f"Kafka refused the credentials for role {role} in {where}: {why.splitlines()[0]}; for the local "
        "stack `wakeful dev up` (re)creates the user, for your own cluster `wakeful admin kafka-acl --apply`"
    )
