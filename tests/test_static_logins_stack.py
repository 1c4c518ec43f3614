"""The example downstreams have no static login (D125), on the real stack: `wakeful admin acl
--apply` removes the user and the password file a state dir from before holds, and no role's
client can be made for them."""

from __future__ import annotations

import os

import orjson
import pytest
import redis
from helpers import run_cli

from wakeful.core import secrets
from wakeful.core.errors import MissingCredential
from wakeful.core.settings import Settings
from wakeful.state import acl, credentials


@pytest.mark.timeout(120)
def test_an_old_static_downstream_login_is_removed_from_redis_and_disk_and_none_is_made_again(
    settings: Settings, redis_client: redis.Redis
) -> None:
    [bank] = [d for d in acl.downstreams_of(settings) if d.user == "bank"]
    old_user, where = acl.user_name("bank"), secrets.path(settings, "bank", credentials.NAME)
    # a state dir from before: the bank's static user, its password on disk
    rules = acl.setuser_commands({"bank": "reusable-password"}, {"bank": acl.downstream_rules(bank)})
    redis_client.execute_command(*rules[0])  # type: ignore[no-untyped-call]
    where.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    where.write_bytes(orjson.dumps({"user": old_user, "password": "reusable-password"}))
    assert redis_client.acl_getuser(old_user) is not None

    done = run_cli(dict(os.environ), "admin", "acl", "--apply", timeout=90)
    assert done.returncode == 0, done.stderr
    assert f"removed {where}" in done.stderr
    assert redis_client.acl_getuser(old_user) is None  # the user, and with it every login as it
    assert not where.exists()
    assert "bank" not in acl.users(settings)
    with pytest.raises(redis.AuthenticationError):
        acl.client(settings, username=old_user, password="reusable-password").ping()
    with pytest.raises(MissingCredential, match="credential = 'bank'"):
        acl.connect(settings, "bank")

    again = run_cli(dict(os.environ), "admin", "acl", "--apply", timeout=90)
    assert again.returncode == 0 and f"removed {where}" not in again.stderr
    assert redis_client.acl_getuser(old_user) is None and not where.exists()
