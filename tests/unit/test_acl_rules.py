"""The Redis users written two ways, as the aclfile the local Redis loads and as the ACL SETUSER
commands `wakeful admin acl` prints for a Redis of one's own, hold the same rules (what they let each
role do, on a real Redis: tests/test_acl.py)."""

from __future__ import annotations

from wakeful.core.settings import Settings
from wakeful.state import acl


def test_setuser_commands_match_the_aclfile_rules() -> None:
    users = acl.users(Settings.from_env({}))
    creds = {role: "pw" for role in (*users, acl.DEFAULT)}
    lines = acl.aclfile_lines(creds, users)
    commands = acl.setuser_commands(creds, users)
    for role, command in zip(users, commands, strict=True):
        line = next(x for x in lines if x.startswith(f"user {acl.user_name(role)} "))
        assert " ".join(command[4:]) in line
        assert all(part.count("(") == part.count(")") for part in command)
