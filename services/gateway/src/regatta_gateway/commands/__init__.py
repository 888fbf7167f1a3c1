"""Commands of the gateway: validate, decide on the stream concerned, record what was asked as events."""
