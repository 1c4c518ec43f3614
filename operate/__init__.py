"""What an operator runs against a live deployment: the admin client, recover, purge, retention
sweeps, dead-letter replay, release, the kill path, Kafka ACL and topic provisioning, the log
reader, the audit chain and the ops page."""
