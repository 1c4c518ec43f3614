"""The ops page in a real browser (Debian's chromium, driven by Playwright) against `wakeful ops` run
as an operator runs it, on the real stack: nothing is mocked. A person logs in through the form,
finds tasks by stage and one by its id, and freezes a task through the confirmation step: the page
then shows it frozen, `wakeful frozen` agrees, and the authority copy is refreshed as the CLI's
freeze refreshes it. A page asked for without a login goes to the login, a wrong password is
refused, and a form posted without the CSRF token, with a forged cookie or with a signed cookie of
no session the server holds changes nothing (tests/test_ops_sessions.py attacks the sessions)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_run import doc, wakeful, with_tests_on_path
from helpers import BankClient, free_ports

from wakeful.core.settings import Settings
from wakeful.devstack.fleet import Fleet
from wakeful.operate import kill
from wakeful.operate.ops import auth as ops_auth
from wakeful.state import keys
from wakeful.state.index import Index

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]
OPERATOR = "ops-lead"  # a dev signer that may send task.reopen: an operator
START_S = 30.0

pytestmark = pytest.mark.timeout(120)


def _browser_ready() -> None:
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"no {CHROMIUM}: run `bash scripts/setup` (it installs Debian's chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.fail("Playwright for Python is missing: run `bash scripts/setup` (pip install -e '.[dev]')")


@contextmanager
def serving(settings: Settings) -> Iterator[str]:
    """`wakeful ops` on a free port, as its own process, until the block ends."""
    [port] = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "wakeful.cli.main", "ops", "--port", str(port)],
        env=with_tests_on_path(dict(os.environ)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
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
                err = proc.stderr.read().decode() if proc.stderr and proc.poll() is not None else ""
                pytest.fail(f"`wakeful ops` did not answer within {START_S:.0f} s: {err[-2000:]}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture(scope="module")
def ops_url(settings: Settings, client: BankClient) -> Iterator[str]:
    """One `wakeful ops` for the module (the local authority defaults restored first: `client`)."""
    _browser_ready()
    with serving(settings) as url:
        yield url


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Debian's chromium with a fresh profile, for the module."""
    _browser_ready()
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium") / "profile"
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, args=ARGS, headless=True
        )
        try:
            context.set_default_timeout(15_000)
            yield context
        finally:
            context.close()


@pytest.fixture()
def page(browser: Any) -> Any:
    """A page with no session: each test logs in (or not) for itself."""
    browser.clear_cookies()
    return browser.pages[0] if browser.pages else browser.new_page()


def log_in(page: Any, password: str) -> None:
    page.fill("input[name=operator]", OPERATOR)
    page.fill("input[name=password]", password)
    page.click("button:has-text('Log in')")


def wait_indexed(client: BankClient, task_id: str, stage: str) -> None:
    """Until the relay's index shows the task at `stage` (the page reads the index)."""
    index, deadline = Index(client.admin), time.monotonic() + 30
    while (found := index.task("default", task_id)) is None or found["stage"] != stage:
        assert time.monotonic() < deadline, f"the index never showed {task_id} at {stage}: {found}"
        time.sleep(0.05)


def test_an_operator_finds_tasks_by_stage_and_a_task_frozen_on_the_page_is_frozen_for_the_fleet(
    client: BankClient, shared_fleet: Fleet, settings: Settings, ops_url: str, page: Any
) -> None:
    url, password = ops_url, ops_auth.ensure_login(settings).password
    waiting = [client.new_task(2500)[0] for _ in range(2)]
    done, _ = client.new_task(100)
    for task_id in waiting:
        wait_indexed(client, task_id, "awaiting_approval")
    wait_indexed(client, done, "closed")
    journal_before = client.admin.get(keys.JOURNAL_AUTHORITY)
    target = waiting[0]
    try:
        page.goto(f"{url}/tasks")
        assert "/login" in page.url
        log_in(page, password)
        page.wait_for_url(f"{url}/tasks")

        page.select_option("select[name=tenant]", "default")
        page.select_option("select[name=stage]", "awaiting_approval")
        page.click("button:has-text('Show')")
        listed = page.inner_text("main")
        assert all(t in listed for t in waiting) and done not in listed, listed
        page.select_option("select[name=stage]", "closed")
        page.click("button:has-text('Show')")
        assert done in page.inner_text("main")

        page.fill("input[name=id]", target)
        page.click("button:has-text('Find task')")
        page.wait_for_url(f"{url}/task/{target}")
        shown = page.inner_text("main")
        assert "awaiting_approval" in shown and "approval" in shown and "FROZEN" not in shown, shown

        page.fill("input[name=reason]", "customer dispute")
        page.click("button:has-text('Freeze this task')")
        said = page.inner_text("#what-will-happen")
        assert f"Freeze task {target}." in said and "customer dispute" in said and OPERATOR in said, said
        assert target not in client.authority.frozen() and f"task:{target}" not in client.authority.frozen()
        page.click("button:has-text('Yes, do exactly this')")
        assert f"frozen task:{target}" in page.inner_text("#done")

        page.click(f"a:has-text('{target}')")
        assert f"FROZEN (task:{target}) by {OPERATOR}" in page.inner_text("main")
        page.goto(f"{url}/switches")
        assert f"task:{target}" in page.inner_text("main")

        listed_by_cli = doc(wakeful("frozen", "--json"))["frozen"]
        assert listed_by_cli[f"task:{target}"]["by"] == OPERATOR, listed_by_cli
        assert listed_by_cli[f"task:{target}"]["reason"] == "customer dispute"
        # The page leaves the authority copy a CLI freeze leaves (cli/recover_cmd.py's journal).
        assert client.admin.get(keys.JOURNAL_AUTHORITY) != journal_before
    finally:
        kill.thaw(client.authority, f"task:{target}", OPERATOR, "test over", 0)


def test_no_page_without_a_login_and_no_switch_without_the_csrf_token_or_a_signed_cookie(
    client: BankClient, settings: Settings, ops_url: str, page: Any
) -> None:
    login, url = ops_auth.ensure_login(settings), ops_url
    page.goto(f"{url}/switches")
    assert "/login" in page.url
    page.fill("input[name=operator]", OPERATOR)
    page.fill("input[name=password]", "not the password")
    page.click("button:has-text('Log in')")
    assert "Wrong operator name or password" in page.inner_text("main")
    assert not [c for c in page.context.cookies() if c["name"] == ops_auth.COOKIE]
    page.goto(f"{url}/")
    assert "/login" in page.url

    forged = ops_auth.sign(b"not the key" * 3, OPERATOR, int(time.time()))
    freeze = {"action": "freeze", "kind": "all", "name": "", "reason": "r", "confirmed": "yes"}
    # Signed with the real key but never logged in: the server holds no such session (D91).
    unheld = ops_auth.sign(login.session_key, OPERATOR, int(time.time()))
    for cookie in (forged, unheld):
        with httpx.Client(base_url=url, cookies={ops_auth.COOKIE: cookie}) as as_forger:
            assert as_forger.post("/switches/apply", data=freeze).status_code == 403
            assert as_forger.get("/").status_code == 303
    with httpx.Client(base_url=url) as logged_in:
        form = logged_in.get("/login").text
        nonce = form.split('name="nonce" value="')[1].split('"')[0]
        fields = {"nonce": nonce, "next": "/", "operator": OPERATOR, "password": login.password}
        assert logged_in.post("/login", data=fields).status_code == 303
        answer = logged_in.post("/switches/apply", data=freeze)
        assert answer.status_code == 403 and "CSRF" in answer.text
        odd = logged_in.get("/task", params={"id": "x}:{y"})
        assert odd.status_code == 400 and "task id" in odd.text
    assert "all" not in client.authority.frozen()
