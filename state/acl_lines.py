"""The Redis users wakeful makes, written out: as aclfile lines for a Redis it starts, and as ACL
SETUSER commands for one it does not (state/acl.py holds the rules themselves)."""

from __future__ import annotations

import hashlib

# The built-in default user may run everything, but only with a password nobody is given: an
# unauthenticated connection gets NOAUTH for every command. It cannot be restricted instead,
# because Redis 7.0 replays MULTI/EXEC blocks (and multi-write scripts) from the AOF as the
# default user and re-checks its ACL at EXEC: a restricted default user silently drops every
# transaction on restart (redis/redis#14541, fixed only in later releases). docs/decisions.md D16.
DEFAULT_RULES = "on resetkeys ~* resetchannels &* +@all"
DEFAULT = "default"


def user_name(role: str) -> str:
    return f"wakeful-{role}"


def aclfile_lines(creds: dict[str, str], rules: dict[str, str]) -> list[str]:
    """The users (`rules`, from users()) as lines of a Redis aclfile (passwords stored hashed)."""
    default = hashlib.sha256(creds[DEFAULT].encode()).hexdigest()
    lines = [f"user default {DEFAULT_RULES} #{default}"]
    for role, rule in rules.items():
        digest = hashlib.sha256(creds[role].encode()).hexdigest()
        lines.append(f"user {user_name(role)} on #{digest} {rule}")
    return lines


def setuser_commands(creds: dict[str, str], rules: dict[str, str]) -> list[list[str]]:
    """The same users as ACL SETUSER argument lists, for a Redis that wakeful did not start."""
    commands = []
    for role, rule in rules.items():
        digest = hashlib.sha256(creds[role].encode()).hexdigest()
        commands.append(["ACL", "SETUSER", user_name(role), "reset", "on", f"#{digest}", *split(rule)])
    return commands


def split(rules: str) -> list[str]:
    """Split rules on spaces, keeping each parenthesised selector as one argument."""
    out: list[str] = []
    depth, word = 0, ""
    for ch in rules:
        if ch == " " and depth == 0:
            if word:
                out.append(word)
            word = ""
            continue
        depth += (ch == "(") - (ch == ")")
        word += ch
    if word:
        out.append(word)
    return out
