"""What the whole box spends: the roles, the Kafka broker and the Redis server together.

A user pays for everything on the machine, so the bench's headline is the sum (`box`), at flat
out and at an offered rate alike. `wakeful bench --idle N` measures a fleet that has nothing to do:
it starts the roles, runs one task through so every role has joined its groups and connected,
waits until that task's records are off the outbox, then reads each process's CPU over N seconds.
What an idle fleet costs is what a mostly-waiting fleet pays all day between wakes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil

from wakeful.bench.traffic import load_traffic, warm_up
from wakeful.core import process
from wakeful.core.process import Say
from wakeful.core.settings import Settings
from wakeful.devstack import kafka, redis_server, stack
from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import Client
from wakeful.sdk.app import ENV, load_app
from wakeful.state import keys

SERVERS = ("kafka", "redis")
PROGRESS_S = 10.0  # seconds between progress lines while an idle fleet is watched


JIT = "kafka_jit"  # of the broker's CPU, what its JVM spent compiling (server_cpu)
JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")  # their names, cut to 15 characters by Linux


def box(roles_ms: float, servers_ms: Mapping[str, float]) -> dict[str, Any]:
    """The whole box's CPU ms per task: the roles', each server's this machine runs, their total,
    and whether the servers were counted at all (a remote one is not on this box's bill). A broker
    started minutes ago spends much of its CPU compiling its own code (JIT): that share is shown,
    and `settled` is the total without it, what a broker that has run for a while costs."""
    found = {name: round(servers_ms[name], 2) for name in SERVERS if name in servers_ms}
    total = roles_ms + sum(found.values())
    # A lower bound: a compiler thread that ended within the window takes its CPU with it.
    jit = round(min(max(servers_ms.get(JIT, 0.0), 0.0), found["kafka"]), 2) if "kafka" in found else 0.0
    return {
        "roles": round(roles_ms, 2),
        **found,
        JIT: jit,
        "total": round(total, 2),
        "settled": round(total - jit, 2),
        "servers_counted": sorted(found),
    }


def render_box(figures: Mapping[str, Any]) -> str:
    parts = [f"roles {figures['roles']}"] + [f"{n} {figures[n]}" for n in SERVERS if n in figures]
    missing = [n for n in SERVERS if n not in figures]
    note = f"; {', '.join(missing)} not on this machine, not counted" if missing else ""
    jit = figures.get(JIT, 0.0)
    settled = f"; {figures['settled']} ms without the broker's {jit} ms of JIT compiling" if jit else ""
    return f"box CPU per task: {figures['total']} ms ({', '.join(parts)}{note}{settled})"


def server_cpu(settings: Settings, since: Mapping[str, float] | None = None) -> dict[str, float]:
    """CPU seconds used so far (or since the figures `since`) by the Kafka broker and the Redis
    server this machine runs for `settings` (`wakeful dev up`), and of the broker's, what its JIT
    compiler threads used (JIT); a server run elsewhere is left out."""
    found = {}
    for name, server in (("kafka", kafka), ("redis", redis_server)):
        pid = process.running_pid(server.pid_path(settings), server.is_ours(settings))
        try:
            proc = psutil.Process(pid) if pid else None
            times = proc.cpu_times() if proc else None
            if proc is not None and name == "kafka":
                found[JIT] = _jit_seconds(proc)
        except psutil.Error:
            times = None
        if times is not None:
            found[name] = times.user + times.system
    if since is None:
        return found
    return {k: v - since[k] for k, v in found.items() if k in since}


def _jit_seconds(proc: psutil.Process) -> float:
    """CPU seconds of the JVM's compiler threads (Linux: /proc/<pid>/task/<tid>/comm names them)."""
    spent = 0.0
    for thread in proc.threads():
        try:
            name = Path(f"/proc/{proc.pid}/task/{thread.id}/comm").read_text().strip()
        except OSError:  # the thread ended meanwhile, or no /proc here
            continue
        if name.startswith(JIT_THREADS):
            spent += thread.user_time + thread.system_time
    return spent


def fleet_env(settings: Settings, base: Mapping[str, str]) -> dict[str, str]:
    """What a bench's fleet runs with: `base`, the rules model, and the app the settings name."""
    return dict(base) | {"WAKEFUL_MODEL": "rules"} | ({ENV: settings.app} if settings.app else {})


def shares(spent_s: Mapping[str, float], seconds: float) -> dict[str, float]:
    """CPU seconds spent over `seconds` as percent of one core, two decimals."""
    return {name: round(100 * s / max(1e-9, seconds), 2) for name, s in spent_s.items()}


def idle(settings: Settings, seconds: float, say: Say) -> dict[str, Any]:
    """An idle fleet's CPU share per process, and the servers', over `seconds`."""
    traffic = load_traffic(load_app(settings.app))
    stack.up(settings, say)
    client = Client(settings)
    fleet = Fleet(fleet_env(settings, os.environ))
    say(f"starting {len(fleet.members)} processes ({', '.join(fleet.members)}) ...")
    fleet.start()
    try:
        client.reset_authority()
        warm_up(client, traffic)  # every role joined, connected and through its first message
        if not process.wait_until(lambda: not client.admin.scard(keys.OUTBOX_DIRTY), 60, interval=0.2):
            say("the warm-up task's records are still on the outbox after 60 s; measuring anyway")
        say(f"warm; watching the idle fleet for {seconds:.0f} s ...")
        commands = redis_commands(client)
        before = fleet.cpu_now(), server_cpu(settings)
        started = time.monotonic()
        while (left := started + seconds - time.monotonic()) > 0:
            time.sleep(min(PROGRESS_S, left))
            if left > PROGRESS_S:
                say(f"  {time.monotonic() - started:.0f}/{seconds:.0f} s")
        elapsed = time.monotonic() - started
        roles = {m: c - before[0].get(m, 0.0) for m, c in fleet.cpu_now().items()}
        servers = server_cpu(settings, before[1])
        commands = redis_commands(client) - commands
    finally:
        fleet.stop()
        client.close()
    per = shares(roles, elapsed) | {"roles": round(100 * sum(roles.values()) / elapsed, 2)}
    per |= shares(servers, elapsed)
    if JIT in per:  # a lower bound, as in box()
        per[JIT] = min(max(per[JIT], 0.0), per.get("kafka", 0.0))
    per["total"] = round(per["roles"] + sum(per[n] for n in SERVERS if n in per), 2)
    per["settled"] = round(per["total"] - per.get(JIT, 0.0), 2)
    return {
        "idle_s": round(elapsed, 1),
        "processes": list(fleet.members),
        "cpu_pct_of_core": per,
        "servers_counted": [n for n in SERVERS if n in servers],
        "redis_commands_per_s": round(commands / elapsed, 1),
    }


def redis_commands(client: Client) -> int:
    """The Redis server's count of commands it has processed, all clients together."""
    info: dict[str, Any] = client.admin.info("stats")
    return int(info["total_commands_processed"])


def render_idle(r: Mapping[str, Any]) -> str:
    per = r["cpu_pct_of_core"]
    members = ", ".join(f"{m} {per[m]}" for m in r["processes"])
    servers = ", ".join(f"{n} {per[n]}%" for n in SERVERS if n in per) or "servers not on this machine"
    return "\n".join(
        [
            f"idle fleet      : {r['idle_s']} s, no tasks, {len(r['processes'])} role processes",
            f"box CPU         : {per['total']}% of a core (roles {per['roles']}%, {servers}); "
            f"{per['settled']}% without the broker's JIT compiling",
            f"roles, % of core: {members}",
            f"redis commands  : {r['redis_commands_per_s']}/s",
        ]
    )
