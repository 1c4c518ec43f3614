"""The Kafka plumbing every role shares: the runner, role start-up, batching, producing, dead letters,
failures, switch acknowledgements and wiring."""
