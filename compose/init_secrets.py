"""The compose stack's secrets: the sealing keyring, one Redis password per role, Redis's ACL file,
one Kafka SCRAM password per role, and the broker's own configuration.

The `init` service runs this before Redis and the roles start, at every `up`. It creates what is
missing and keeps what exists: a new keyring would leave every sealed task unreadable, and new
passwords would lock out the running roles. Each role's passwords and channel key go into that
role's own folder under WAKEFUL_SECRETS (its own volume, which only that role mounts), and so does
a reading role's copy of its senders' channel keys (verifying.json). The ACL file is rebuilt
from the kept passwords each time, so Redis always loads users that match them.

    python compose/init_secrets.py --aclfile PATH [--kafka-config DIR] [--rotate-redis ROLE ...]

Paths come from WAKEFUL_KEYRING and WAKEFUL_SECRETS, as for every wakeful command. Each role's
Kafka password is `$WAKEFUL_SECRETS/<role>/kafka.json` (core/secrets.py), on the role's own volume.
`--kafka-config DIR` writes what the kafka service starts from: its server.properties (SASL on
every listener, ACLs on, the admin as the only super user; the same settings as the local stack,
devstack/kafka_props.py), the admin's SCRAM credential for `kafka-storage format --add-scram`, and
admin.properties for its health check. These hold the admin's password, so they are 0600 and owned
by the broker's user (--kafka-uid).
`--rotate-redis ROLE` replaces that role's password (restart Redis and the role afterwards).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from wakeful.authority import signer_seal
from wakeful.core import kafka_auth, provenance
from wakeful.core.errors import WakefulError
from wakeful.core.kafka_rights import ADMIN, ROLES
from wakeful.core.settings import Settings
from wakeful.devstack import kafka_props
from wakeful.state import acl, credentials
from wakeful.state.seal import Keyring

# Redis runs as its own unprivileged user in its container and must read the file. It holds only
# SHA-256 hashes of 192-bit random passwords, and only the redis and init services mount it.
ACLFILE_MODE = 0o644
KAFKA_UID = 1000  # `appuser` in the apache/kafka image
KAFKA_PORT, CONTROLLER_PORT, KAFKA_HOST = 9092, 9093, "kafka"


def ensure_keyring(path: Path) -> str:
    if path.exists():
        ring = Keyring.load(path)  # a damaged keyring stops the stack here, before any role starts
        return f"kept the sealing keyring {path} (keys: {', '.join(ring.kids)}; active: {ring.active})"
    Keyring.generate().save(path)
    return f"created the sealing keyring {path} (mode 0600)"


def write_aclfile(path: Path, creds: dict[str, str], rules: dict[str, str]) -> None:
    _write(path, ("\n".join(acl.aclfile_lines(creds, rules)) + "\n").encode(), ACLFILE_MODE)


def ensure_kafka_users(settings: Settings) -> list[str]:
    """Every role's Kafka credential, each in its role's own folder; kept once made."""
    for role in ROLES:
        kafka_auth.ensure_credential(settings, role)
    return list(ROLES)


def write_kafka_config(folder: Path, settings: Settings, uid: int) -> None:
    """The broker's configuration, rebuilt each time from the kept admin credential."""
    admin = kafka_auth.credential(settings, ADMIN)
    user, password = admin["username"], admin["password"]
    server = [
        *kafka_props.listeners(
            KAFKA_PORT, CONTROLLER_PORT, host="0.0.0.0", advertised=KAFKA_HOST
        ),  # a container's own interface
        *kafka_props.security(user, password),
        *kafka_props.tokens(password),  # delegation tokens for the Kafka downstreams (D123)
        "log.dirs=/var/lib/kafka/data",
        f"num.partitions={settings.partitions}",
        *kafka_props.SINGLE_NODE,
        *kafka_props.CONSUMER_GROUPS,
    ]
    jaas = kafka_props.scram_login(user, password)
    client = ["security.protocol=SASL_PLAINTEXT", "sasl.mechanism=SCRAM-SHA-256", f"sasl.jaas.config={jaas}"]
    files = {
        "server.properties": server,
        "admin.properties": client,
        "admin-scram": kafka_props.add_scram(user, password)[1::2],  # one --add-scram value a line
    }
    for name, lines in files.items():
        _write(folder / name, ("\n".join(lines) + "\n").encode(), 0o600)
        if os.geteuid() == 0:
            os.chown(folder / name, uid, uid)


def _write(path: Path, data: bytes, mode: int) -> None:
    """Replace the file in one rename, so a Redis starting meanwhile never reads half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    os.fchmod(fd, mode)  # a stale temp file keeps its old mode through O_CREAT
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aclfile", type=Path, required=True, help="where Redis loads its users from")
    parser.add_argument("--kafka-config", type=Path, help="where the kafka service reads its configuration")
    parser.add_argument("--kafka-uid", type=int, default=KAFKA_UID, help="the broker's user id in its image")
    parser.add_argument(
        "--rotate-redis",
        action="append",
        default=[],
        metavar="ROLE",
        help=f"give this Redis user a new password ({', '.join(acl.ROLES)}, a downstream's or {acl.DEFAULT})",
    )
    args = parser.parse_args(argv)
    try:
        settings = Settings.from_env()
        print(ensure_keyring(settings.keyring))
        made = provenance.ensure_keys(settings)
        print(f"role channel keys: made {', '.join(made) or 'none'}, kept the rest, in {settings.secrets}")
        active = signer_seal.ensure(settings)
        print(f"HMAC signer seal: key {active}, for {', '.join(signer_seal.VERIFIERS)} and the admin")
        users = acl.users(settings)
        unknown = [role for role in args.rotate_redis if role not in (*users, acl.DEFAULT)]
        if unknown:
            parser.error(
                f"--rotate-redis {', '.join(unknown)}: the users are {', '.join([*users, acl.DEFAULT])}"
            )
        for role in args.rotate_redis:
            credentials.rotate(settings, role)
        creds = credentials.ensure_all(settings)
        write_aclfile(args.aclfile, creds, users)
        kafka_users = ensure_kafka_users(settings)
        if args.kafka_config is not None:
            write_kafka_config(args.kafka_config, settings, args.kafka_uid)
    except (WakefulError, OSError) as exc:
        print(f"init failed: {exc}", file=sys.stderr)
        return 1
    if args.rotate_redis:
        print(f"new Redis passwords for: {', '.join(args.rotate_redis)}; restart redis and those roles")
    print(
        f"Redis users for {', '.join(users)} in {args.aclfile}; each password in "
        f"{settings.secrets}/<role>/{credentials.NAME}.json"
    )
    print(f"Kafka users for {', '.join(kafka_users)}: each in {settings.secrets}/<role>/kafka.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
