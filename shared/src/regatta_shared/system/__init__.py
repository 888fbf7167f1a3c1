"""A service process: the runtime it runs in and the parts it is made of (logging, NATS, the store)."""
