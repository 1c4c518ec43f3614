"""egress_app's app with owners (D121): a gate or executor of it runs only a release that a
business owner and a security owner, two principals, signed. sam holds both roles."""

from __future__ import annotations

from dataclasses import replace

from egress_app import app as unowned

OWNERS = {"business": ["dana", "sam"], "security": ["sam", "sec"]}
app = replace(unowned, owners=OWNERS)
