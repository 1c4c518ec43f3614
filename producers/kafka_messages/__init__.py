"""Kafka's delegation-token requests, as kafka-python's message classes read them (producers/kafka_tokens.py):
one JSON schema per message, the fields and versions of the Kafka protocol's own definitions."""
