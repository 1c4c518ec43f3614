"""Rebuilding Redis from Kafka after it is lost (`wakeful recover`)."""
