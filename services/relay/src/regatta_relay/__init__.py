"""The relay service: publishes the event store's events to JetStream (relay.py)."""
