"""Who may see the ops page (`wakeful ops`, D76): its password, its session cookie and CSRF tokens.

The page's password and the key that signs its cookies live in the admin's secrets folder,
`$WAKEFUL_SECRETS/admin/ops.json` (0600), made on the first `wakeful ops`: whoever may read the
admin's Redis password may read this one too, and nobody else. The Redis password itself never
leaves the machine: the page connects to Redis with it, a person logs in with the page's own.

A session is a cookie `<payload>.<mac>`: the payload names the operator (who is recorded as `--by`
on every switch they throw), when the session ends at the latest and a random nonce; the MAC is
HMAC-SHA256 under the session key. A good signature is not enough: the session must also be live on
the server (operate/ops/sessions.py: logout, the idle limit and the absolute limit end it there), and
a new key (`wakeful ops --new-password`) ends every session at once. Each form carries a CSRF token,
the HMAC of the session's nonce, so a form posted from another site (or from another session) is
refused. Every comparison of a secret is constant-time.

A failed login is slowed by the address it came from: the peer's, or, only when the peer is a
proxy the operator named (`--trusted-proxy`), the address that proxy says it forwards for. Anyone
else's `X-Forwarded-For` is their own word and changes nothing. Pure: no I/O but reading and writing
the secret file.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import re
import secrets as random
from dataclasses import dataclass
from pathlib import Path

from wakeful.core import secrets
from wakeful.core.settings import Settings
from wakeful.state import keys

NAME = "ops"  # $WAKEFUL_SECRETS/admin/ops.json
COOKIE = "wakeful_ops"
SESSION_S = keys.OPS_SESSION_MAX_S  # a session lasts a working day at most, then its person logs in again
OPERATOR_RE = re.compile(r"[A-Za-z0-9_.@-]{1,64}")  # a principal's name, as a signer key names it
FAILURE_WINDOW_S = 900  # failed logins are counted this long
DELAY_BASE_S = 0.5  # the first failed login answers after this; each next one waits twice as long
DELAY_CAP_S = 8.0


@dataclass(frozen=True)
class Login:
    """The page's password and the key its cookies are signed with."""

    password: str
    session_key: bytes


@dataclass(frozen=True)
class Session:
    operator: str
    expires: int  # unix seconds
    nonce: str


def _new() -> dict[str, str]:
    return {"password": random.token_urlsafe(18), "session_key": random.token_hex(32)}


def login_path(settings: Settings) -> Path:
    return secrets.path(settings, "admin", NAME)


def ensure_login(settings: Settings, *, rotate: bool = False) -> Login:
    """The page's password and session key, made the first time (or anew with `rotate`, which also
    ends every session)."""
    if rotate:
        secrets.replace(settings, "admin", NAME, _new())
    doc = secrets.ensure(settings, "admin", NAME, _new)
    return Login(doc["password"], bytes.fromhex(doc["session_key"]))


def password_ok(given: str, expected: str) -> bool:
    """Constant-time, whatever the lengths: the digests are compared, never the texts."""
    a = hashlib.sha256(given.encode("utf-8", "replace")).digest()
    b = hashlib.sha256(expected.encode()).digest()
    return hmac.compare_digest(a, b)


def _mac(key: bytes, purpose: str, text: str) -> str:
    digest = hmac.new(key, f"{purpose}|{text}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def sign(key: bytes, operator: str, now: int, *, nonce: str | None = None, lasts: int = SESSION_S) -> str:
    """A session cookie's value for `operator`, good for `lasts` seconds from `now`."""
    if not OPERATOR_RE.fullmatch(operator):
        raise ValueError(f"{operator[:40]!r} is not an operator name")
    nonce = nonce or random.token_hex(16)
    payload = f"{operator}|{now + lasts}|{nonce}"
    encoded = base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")
    return f"{encoded}.{_mac(key, 'session', encoded)}"


def verify(key: bytes, value: str | None, now: int) -> Session | None:
    """The session a cookie names, or None: absent, malformed, forged or expired."""
    if not value or len(value) > 512 or value.count(".") != 1:
        return None
    encoded, mac = value.split(".")
    if not hmac.compare_digest(_mac(key, "session", encoded).encode(), mac.encode()):
        return None
    try:
        payload = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
        operator, expires_text, nonce = payload.split("|")
        expires = int(expires_text)
    except ValueError:  # a bad base64, UTF-8 or number is a ValueError; only a signed payload gets here
        return None
    if expires <= now or not OPERATOR_RE.fullmatch(operator):
        return None
    return Session(operator, expires, nonce)


def csrf_token(key: bytes, session: Session) -> str:
    """The token every form of this session carries."""
    return _mac(key, "csrf", session.nonce)


def csrf_ok(key: bytes, session: Session, given: str | None) -> bool:
    return bool(given) and hmac.compare_digest(csrf_token(key, session).encode(), (given or "").encode())


def delay_after(failures: int) -> float:
    """How long a failed login waits before it answers, given the failures counted before it."""
    return float(min(DELAY_CAP_S, DELAY_BASE_S * 2.0 ** max(0, failures)))


class Failures:
    """Failed logins per client address within FAILURE_WINDOW_S (in memory: one process serves)."""

    def __init__(self) -> None:
        self._seen: dict[str, list[float]] = {}

    def count(self, who: str, now: float) -> int:
        recent = [t for t in self._seen.get(who, ()) if now - t < FAILURE_WINDOW_S]
        if recent:
            self._seen[who] = recent
        else:
            self._seen.pop(who, None)
        return len(recent)

    def add(self, who: str, now: float) -> int:
        """Record one failure; returns how many came before it in the window."""
        before = self.count(who, now)
        self._seen.setdefault(who, []).append(now)
        if len(self._seen) > 10_000:  # many addresses: drop the oldest rather than grow for ever
            self._seen.pop(next(iter(self._seen)))
        return before


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def trusted_proxies(text: str) -> tuple[Network, ...]:
    """The proxies a comma-separated list names (addresses or CIDR blocks); ValueError names a bad one."""
    found = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            found.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ValueError(f"{part[:64]!r} is not an IP address or CIDR block") from None
    return tuple(found)


def _within(address: str, proxies: tuple[Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in proxies)


def client_address(peer: str | None, forwarded_for: str | None, proxies: tuple[Network, ...]) -> str:
    """Who a request counts as: its peer, unless the peer is a trusted proxy; then the right-most
    address of X-Forwarded-For that is no trusted proxy (what the proxy saw: anything left of it is
    the sender's word). A header that is absent or holds no address leaves the peer."""
    who = peer or "?"
    if not forwarded_for or not _within(who, proxies):
        return who
    hops = [h.strip() for h in forwarded_for[:1024].split(",")]
    for hop in reversed(hops):
        try:
            ipaddress.ip_address(hop)
        except ValueError:
            return who  # a hop that is no address: nothing to its left can be believed either
        if not _within(hop, proxies):
            return hop
    return hops[0]
