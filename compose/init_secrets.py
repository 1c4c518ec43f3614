"""The compose stack's secrets: the sealing keyring, one Redis password per role, Redis's ACL file.

The `init` service runs this before Redis and the roles start, at every `up`. It creates what is
missing and keeps what exists: a new keyring would leave every sealed task unreadable, and new
passwords would lock out the running roles. Each role's password goes into that role's own folder
under WAKEFUL_SECRETS (its own volume, which only that role mounts); the ACL file is rebuilt from
the kept passwords each time, so Redis always loads users that match them.

    python compose/init_secrets.py --aclfile PATH [--rotate-redis ROLE ...]

Paths come from WAKEFUL_KEYRING and WAKEFUL_SECRETS, as for every wakeful command.
`--rotate-redis ROLE` replaces that role's password (restart Redis and the role afterwards).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from wakeful.core import provenance
from wakeful.core.errors import WakefulError
from wakeful.core.settings import Settings
from wakeful.state import acl, credentials
from wakeful.state.seal import Keyring

# Redis runs as its own unprivileged user in its container and must read the file. It holds only
# SHA-256 hashes of 192-bit random passwords, and only the redis and init services mount it.
ACLFILE_MODE = 0o644


def ensure_keyring(path: Path) -> str:
    if path.exists():
        ring = Keyring.load(path)  # a damaged keyring stops the stack here, before any role starts
        return f"kept the sealing keyring {path} (keys: {', '.join(ring.kids)}; active: {ring.active})"
    Keyring.generate().save(path)
    return f"created the sealing keyring {path} (mode 0600)"


def write_aclfile(path: Path, creds: dict[str, str]) -> None:
    _write(path, ("\n".join(acl.aclfile_lines(creds)) + "\n").encode(), ACLFILE_MODE)


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
    parser.add_argument(
        "--rotate-redis",
        action="append",
        default=[],
        choices=[*acl.ROLES, acl.DEFAULT],
        metavar="ROLE",
        help=f"give this Redis user a new password (one of {', '.join([*acl.ROLES, acl.DEFAULT])})",
    )
    args = parser.parse_args(argv)
    try:
        settings = Settings.from_env()
        print(ensure_keyring(settings.keyring))
        made = provenance.ensure_keys(settings)
        print(f"role signing keys: made {', '.join(made) or 'none'}, kept the rest, in {settings.secrets}")
        for role in args.rotate_redis:
            credentials.rotate(settings, role)
        creds = credentials.ensure_all(settings)
        write_aclfile(args.aclfile, creds)
    except (WakefulError, OSError) as exc:
        print(f"init failed: {exc}", file=sys.stderr)
        return 1
    if args.rotate_redis:
        print(f"new Redis passwords for: {', '.join(args.rotate_redis)}; restart redis and those roles")
    print(
        f"Redis users for {', '.join(acl.ROLES)} in {args.aclfile}; each password in "
        f"{settings.secrets}/<role>/{credentials.NAME}.json"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
