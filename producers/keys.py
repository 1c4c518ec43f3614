"""Signer keys on disk for upstream systems: Ed25519 keys, and HMAC secrets for webhooks.

A key file holds the 32-byte private seed, base64-encoded on one line, readable by its owner only.
Operators register the raw public key (`public_bytes`) as a VerifyKey under the same key id. A
secret file holds a webhook sender's HMAC-SHA256 secret as one hex line (what `openssl dgst -hmac`
and most webhook libraries take), readable by its owner only; the registry holds the same secret.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from wakeful.core.errors import ConfigError, WakefulError
from wakeful.core.settings import Settings
from wakeful.producers.signing import Ed25519Signer, HmacSigner

SEED_BYTES = 32


def generate_signer(key_id: str, path: str | Path) -> Ed25519Signer:
    """Create a new key at `path` (mode 0600) and return its signer; never overwrites a key."""
    private_key = Ed25519PrivateKey.generate()
    line = base64.b64encode(private_key.private_bytes_raw()) + b"\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise ConfigError(
            str(path), "a key file is already there: load it, or pick another path to make a new key"
        ) from exc
    with os.fdopen(fd, "wb") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())
    return Ed25519Signer(key_id, private_key)


def load_signer(key_id: str, path: str | Path) -> Ed25519Signer:
    """The signer whose seed `generate_signer` wrote to `path`."""
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(str(path), f"cannot read the signer key ({exc.strerror}): fix the path") from exc
    try:
        seed = base64.b64decode(text.strip(), validate=True)
    except binascii.Error:
        seed = b""
    if len(seed) != SEED_BYTES:
        raise ConfigError(
            str(path), f"not a signer key: expected one base64 line holding a {SEED_BYTES}-byte seed"
        )
    return Ed25519Signer.from_seed(key_id, seed)


def public_bytes(signer: Ed25519Signer) -> bytes:
    """The raw 32-byte public key, to register as `VerifyKey(key_id, "ed25519", ...)`."""
    return signer.private_key.public_key().public_bytes_raw()


SECRET_BYTES = 32


def generate_secret(key_id: str, path: str | Path) -> HmacSigner:
    """Create a new HMAC secret at `path` (mode 0600) and return its signer; never overwrites one."""
    secret = secrets.token_bytes(SECRET_BYTES)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise ConfigError(str(path), "a secret file is already there: load it, or pick another path") from exc
    with os.fdopen(fd, "w") as f:
        f.write(secret.hex() + "\n")
        f.flush()
        os.fsync(f.fileno())
    return HmacSigner(key_id, secret)


def load_secret(key_id: str, path: str | Path) -> HmacSigner:
    """The signer whose secret `generate_secret` wrote to `path`."""
    try:
        text = Path(path).read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"cannot read the HMAC secret ({exc}): fix the path") from exc
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        secret = b""
    if len(secret) < 16:
        raise ConfigError(str(path), "not an HMAC secret: expected one hex line of 16 bytes or more")
    return HmacSigner(key_id, secret)


def keystore(settings: Settings) -> Path:
    """Where this machine keeps its principals' signing keys (`wakeful authority signers add`)."""
    return settings.home / "signers"


def local_signer(settings: Settings, principal: str) -> Ed25519Signer:
    """`principal`'s signing key from this machine's keystore, or a WakefulError saying how to
    make one."""
    path = keystore(settings) / f"{principal}.key"
    if not path.exists():
        raise WakefulError(
            f"no signing key for {principal!r} in {path.parent}: add one with "
            f"`wakeful authority signers add {principal} --kinds <event kinds>`"
        )
    return load_signer(f"key-{principal}", path)
