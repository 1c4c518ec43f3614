"""The ops page's sessions and its login slowdown, attacked as an outsider on this machine would: a
real HTTP client (httpx) against `wakeful ops` run as an operator runs it, on the real stack.

A cookie copied before its person logged out opens nothing after (no page, no switch); a session
left idle past its idle limit, or used past its absolute limit, is refused; and a local process
that names a new `X-Forwarded-For` address on every failed login is still slowed, since only a
configured proxy is believed (D89: the ops page's sessions live in Redis)."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import orjson
import pytest
import redis
from cli_run import with_tests_on_path
from helpers import BankClient, free_ports

from wakeful.core.settings import Settings
from wakeful.operate import kill
from wakeful.operate.ops import auth as ops_auth
from wakeful.state import acl, keys

OPERATOR = "ops-lead"  # a dev signer that may send task.reopen: an operator
START_S = 30.0
# Every page behind the login, as a person reaches it (GET), and the posts that change something.
PAGES = (
    "/",
    "/tasks",
    "/task?id=t-1",
    "/task/t-1",
    "/waits",
    "/stuck",
    "/parked",
    "/dlq",
    "/activity",
    "/switches",
)

pytestmark = pytest.mark.timeout(120)


class Server:
    """A running `wakeful ops`: its URL and the file its log lines go to."""

    def __init__(self, url: str, log: Path) -> None:
        self.url, self.log = url, log

    def records(self, event: str) -> list[dict[str, object]]:
        lines = self.log.read_bytes().splitlines()
        found = []
        for line in lines:
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(record, dict) and record.get("event") == event:
                found.append(record)
        return found


@contextmanager
def ops_server(tmp: Path, *args: str) -> Iterator[Server]:
    """`wakeful ops` on a free port with `args`, as its own process, until the block ends."""
    [port] = free_ports(1)
    url, log = f"http://127.0.0.1:{port}", tmp / f"ops-{port}.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "wakeful.cli.main", "ops", "--port", str(port), *args],
            env=with_tests_on_path(dict(os.environ)),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + START_S
        while True:
            try:
                if httpx.get(f"{url}/login", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"`wakeful ops {' '.join(args)}` did not answer: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        yield Server(url, log)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def try_login(client: httpx.Client, password: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """The login form, filled in and posted as a browser posts it."""
    form = client.get("/login")
    nonce = re.search(r'name="nonce" value="([0-9a-f]+)"', form.text)
    assert nonce, form.text
    fields = {"nonce": nonce.group(1), "next": "/", "operator": OPERATOR, "password": password}
    return client.post("/login", data=fields, headers=headers or {})


def logged_in(url: str, password: str) -> httpx.Client:
    client = httpx.Client(base_url=url, timeout=30)
    answer = try_login(client, password)
    assert answer.status_code == 303 and client.cookies.get(ops_auth.COOKIE), answer.text
    return client


def csrf_of(client: httpx.Client) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', client.get("/").text)
    assert found, "no CSRF token on the overview: not logged in?"
    return found.group(1)


def session_key(cookie: str) -> str:
    """The Redis key of the session a cookie names (the test reads the cookie as the browser holds it)."""
    encoded = cookie.split(".", maxsplit=1)[0]
    nonce = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode().split("|")[2]
    return keys.ops_session(hashlib.sha256(nonce.encode()).hexdigest())


def refused_everywhere(url: str, cookie: str, csrf: str, probe: str) -> list[str]:
    """Every page and switch `cookie` still opens (none, if the session is over)."""
    opened = []
    with httpx.Client(base_url=url, cookies={ops_auth.COOKIE: cookie}, timeout=30) as thief:
        for path in PAGES:
            answer = thief.get(path)
            if not (answer.status_code == 303 and answer.headers["location"].startswith("/login")):
                opened.append(f"GET {path}: {answer.status_code}")
        freeze = {"action": "freeze", "kind": "task", "name": probe, "reason": "copied cookie"}
        for path, extra in (("/switches/confirm", {}), ("/switches/apply", {"confirmed": "yes"})):
            answer = thief.post(path, data={**freeze, **extra, "csrf": csrf})
            if answer.status_code != 403:
                opened.append(f"POST {path}: {answer.status_code}")
    return opened


def test_a_cookie_copied_before_logout_opens_no_page_and_throws_no_switch_after_it(
    client: BankClient, settings: Settings, tmp_path: Path
) -> None:
    password, probe = ops_auth.ensure_login(settings).password, f"t-{uuid.uuid4().hex[:10]}"
    with ops_server(tmp_path) as ops:
        person = logged_in(ops.url, password)
        copied, csrf = person.cookies[ops_auth.COOKIE], csrf_of(person)
        assert person.get("/switches").status_code == 200  # the copy is good while its person is in
        assert person.post("/logout", data={"csrf": csrf}).status_code == 303
        try:
            assert refused_everywhere(ops.url, copied, csrf, probe) == []
            assert f"task:{probe}" not in client.authority.frozen()
        finally:
            kill.thaw(client.authority, f"task:{probe}", OPERATOR, "test over", 0)
            person.close()


def test_a_session_is_refused_once_idle_past_its_idle_limit_or_used_past_its_absolute_limit(
    client: BankClient, settings: Settings, tmp_path: Path
) -> None:
    password, idle, most = ops_auth.ensure_login(settings).password, 2, 5
    with ops_server(tmp_path, "--session-idle", str(idle), "--session-max", str(most)) as ops:
        # Idle: nobody uses it; it ends when Redis lets its record lapse, and the page agrees.
        left = logged_in(ops.url, password)
        cookie = left.cookies[ops_auth.COOKIE]
        named = session_key(cookie)
        assert client.admin.exists(named) == 1
        deadline = time.monotonic() + idle + 10
        while client.admin.exists(named):
            assert time.monotonic() < deadline, f"{named} outlived its idle limit"
            time.sleep(0.1)
        assert refused_everywhere(ops.url, cookie, csrf="x", probe="t-idle") == []

        # Absolute: used every few tenths of a second, it lives past its idle limit, never past its life.
        busy, started = logged_in(ops.url, password), time.monotonic()
        deadline, last_good = started + most + 10, started
        while (answer := busy.get("/")).status_code == 200:
            last_good = time.monotonic()
            assert last_good < deadline, "a session in use outlived its absolute limit"
            time.sleep(0.2)
        assert answer.status_code == 303 and answer.headers["location"].startswith("/login")
        assert last_good - started > idle, "use did not keep the session alive past its idle limit"
        assert refused_everywhere(ops.url, busy.cookies[ops_auth.COOKIE], csrf="x", probe="t-old") == []
        left.close()
        busy.close()


def test_failed_logins_naming_a_new_forwarded_address_each_time_are_still_slowed(
    client: BankClient, tmp_path: Path
) -> None:
    """Not a configured proxy: X-Forwarded-For is the sender's word, and the peer is who is counted."""
    with ops_server(tmp_path) as ops, httpx.Client(base_url=ops.url, timeout=30) as local:
        took = []
        for n in range(3):
            started = time.monotonic()
            answer = try_login(local, "not the password", {"X-Forwarded-For": f"203.0.113.{n + 1}"})
            took.append(time.monotonic() - started)
            assert answer.status_code == 401
        failed = ops.records("ops.login_failed")
    assert [(r["client"], r["failures"]) for r in failed] == [
        ("127.0.0.1", 1),
        ("127.0.0.1", 2),
        ("127.0.0.1", 3),
    ]
    assert took[2] >= ops_auth.delay_after(2), took  # 2 s after two failures: a lower bound, never flaky


def test_a_configured_proxy_is_believed_about_the_address_it_forwards_for(
    client: BankClient, tmp_path: Path
) -> None:
    with ops_server(tmp_path, "--trusted-proxy", "127.0.0.1") as ops, httpx.Client(base_url=ops.url) as proxy:
        for n in range(2):
            answer = try_login(
                proxy, "not the password", {"X-Forwarded-For": f"198.51.100.7, 203.0.113.{n + 1}"}
            )
            assert answer.status_code == 401
        failed = ops.records("ops.login_failed")
    assert [(r["client"], r["failures"]) for r in failed] == [("203.0.113.1", 1), ("203.0.113.2", 1)]


def test_no_role_login_reads_renews_or_plants_an_ops_session(
    client: BankClient, settings: Settings, tmp_path: Path
) -> None:
    """The session list is the admin's: a role's stolen Redis password neither reads who is logged
    in, nor keeps a session alive, nor makes a copied cookie good again after its logout."""
    password = ops_auth.ensure_login(settings).password
    with ops_server(tmp_path) as ops:
        person = logged_in(ops.url, password)
        named = session_key(person.cookies[ops_auth.COOKIE])
        for role in (r for r in acl.ROLES if r != "admin"):
            stolen = acl.connect(settings, role, timeout=5.0)
            for command in (("GET", named), ("PEXPIRE", named, 60_000), ("SET", named, "{}"), ("DEL", named)):
                with pytest.raises(redis.exceptions.NoPermissionError):
                    stolen.execute_command(*command)  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
            stolen.close()
        assert client.admin.exists(named) == 1
        person.close()
