"""devstack."""
