"""The egress guard in a process of its own (its audit hook cannot be taken back): a confined tool
reaches its declared endpoint; an undeclared one is refused before a connection is made (the
listener on it counts none), in the tool's thread, in a thread it starts, and when the tool swallows
the error; a name outside the list is refused before it is looked up; a process it starts reaches
only the declared endpoint through the executor's proxy, and without the proxy's environment is not
started; the runtime's own connections, outside a tool's run, are not held (D116)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

# Each child's start: a listener on 127.0.0.1 that answers a short page and counts connections.
PRELUDE = textwrap.dedent(
    r"""
    import json, socket, subprocess, sys, threading
    from wakeful.core import egress_guard
    from wakeful.core.egress import resolve
    from wakeful.core.egress_proxy import Proxy

    def listener():
        server = socket.create_server(("127.0.0.1", 0))
        seen = []
        def serve():
            while True:
                conn, _ = server.accept()
                seen.append(1)
                conn.recv(4096)
                conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
                conn.close()
        threading.Thread(target=serve, daemon=True).start()
        return server.getsockname()[1], seen
    """
)

CHILD = PRELUDE + textwrap.dedent(
    r"""
    ok_port, ok_seen = listener()
    no_port, no_seen = listener()
    allowed = resolve("fetch", [f"127.0.0.1:{ok_port}"], {})
    egress_guard.install("app", {"fetch": allowed}, proxy=Proxy().start())
    out = {}

    def reach(port):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            return s.recv(100).split(b"\r\n")[0].decode()

    def attempt(fn):
        try:
            return fn()
        except egress_guard.EgressRefused as exc:
            return "refused: " + str(exc)

    with egress_guard.confined("fetch") as run:
        out["declared"] = attempt(lambda: reach(ok_port))
        out["undeclared"] = attempt(lambda: reach(no_port))
        out["name"] = attempt(lambda: socket.getaddrinfo("evil.invalid", 443))
        found = {}
        t = threading.Thread(target=lambda: found.update(r=attempt(lambda: reach(no_port))))
        t.start(); t.join()
        out["thread"] = found["r"]
        try:
            reach(no_port)
        except Exception:
            pass  # a tool that swallows the refusal
        out["refused"] = list(run.refused)
        out["bare_process"] = attempt(lambda: subprocess.run(["true"]).returncode)
        fetch = "import urllib.request as u,sys; print(u.urlopen(sys.argv[1], timeout=5).read().decode())"
        env = egress_guard.outbound_env()
        for name, port in (("proxied_declared", ok_port), ("proxied_undeclared", no_port)):
            done = subprocess.run([sys.executable, "-c", fetch, f"http://127.0.0.1:{port}/"],
                                  env=env, capture_output=True, text=True, timeout=30)
            out[name] = done.stdout.strip() or done.stderr.strip().splitlines()[-1]
        out["refused_after"] = list(run.refused)
    out["counts_while_confined"] = [len(ok_seen), len(no_seen)]
    out["outside"] = attempt(lambda: reach(no_port))
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def seen() -> dict[str, object]:
    child = [sys.executable, "-c", CHILD]
    done = subprocess.run(child, check=False, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    found: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_a_confined_tool_reaches_its_declared_endpoint(seen: dict[str, object]) -> None:
    assert seen["declared"] == "HTTP/1.0 200 OK"


def test_an_undeclared_endpoint_is_refused_before_any_connection_is_made(seen: dict[str, object]) -> None:
    assert str(seen["undeclared"]).startswith("refused: egress refused: fetch tried 127.0.0.1:")
    assert str(seen["thread"]).startswith("refused: "), "a thread the tool starts is held too"
    counts = seen["counts_while_confined"]
    assert isinstance(counts, list) and counts[1] == 0, "the undeclared listener saw a connection"


def test_a_refusal_the_tool_swallows_is_still_remembered(seen: dict[str, object]) -> None:
    refused = seen["refused"]
    # the undeclared reach, the name, the thread's, and the one the tool swallowed
    assert isinstance(refused, list) and len(refused) == 4, refused


def test_an_undeclared_name_is_refused_before_it_is_looked_up(seen: dict[str, object]) -> None:
    assert str(seen["name"]).startswith("refused: egress refused: fetch tried evil.invalid:443, outside")


def test_a_process_is_started_only_through_the_proxy_and_held_to_the_same_list(
    seen: dict[str, object],
) -> None:
    assert "not started with outbound_env()" in str(seen["bare_process"])
    assert seen["proxied_declared"] == "ok"
    assert "403" in str(seen["proxied_undeclared"])
    before, after = seen["refused"], seen["refused_after"]
    assert isinstance(before, list) and isinstance(after, list)
    assert len(after) == len(before) + 2  # the bare process, then the proxied undeclared reach
    assert after[-1] == before[0], "the proxy's refusal names the undeclared endpoint, on the same run"
    counts = seen["counts_while_confined"]
    assert isinstance(counts, list) and counts == [2, 0]  # the direct call and the proxied one


def test_the_runtime_outside_a_tool_run_is_not_held(seen: dict[str, object]) -> None:
    assert seen["outside"] == "HTTP/1.0 200 OK"


REPORTING = PRELUDE + textwrap.dedent(
    r"""
    port, seen = listener()
    egress_guard.install("app", {"fetch": resolve("fetch", [], {})}, proxy=Proxy().start(), report=True)
    out = {}
    with egress_guard.confined("fetch") as run:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            out["direct"] = s.recv(100).split(b"\r\n")[0].decode()
        out["bare_process"] = subprocess.run(["true"]).returncode
        fetch = "import urllib.request as u,sys; print(u.urlopen(sys.argv[1], timeout=5).read().decode())"
        done = subprocess.run([sys.executable, "-c", fetch, f"http://127.0.0.1:{port}/"],
                              env=egress_guard.outbound_env(), capture_output=True, text=True, timeout=30)
        out["proxied"] = done.stdout.strip() or done.stderr.strip()[-200:]
        out["noted"] = list(run.refused)
    out["port"] = port
    out["reached"] = len(seen)
    print(json.dumps(out))
    """
)


def test_reporting_only_stops_nothing_and_notes_everything_it_would_have_refused() -> None:
    child = [sys.executable, "-c", REPORTING]
    done = subprocess.run(child, check=False, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    where = f"127.0.0.1:{seen['port']}"
    assert (seen["direct"], seen["bare_process"], seen["proxied"], seen["reached"]) == (
        "HTTP/1.0 200 OK",
        0,
        "ok",
        2,
    )
    # the direct reach's look-up and its connect (neither stopped), and the proxied reach
    assert seen["noted"].count(where) == 3, seen["noted"]
    assert any("not started with outbound_env()" in n for n in seen["noted"]), seen["noted"]
