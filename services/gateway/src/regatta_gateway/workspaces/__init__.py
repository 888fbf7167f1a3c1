"""The workspace aggregate (aggregate.py, records.py: pure decisions) and the one way to append to its
stream (appends.py); the commands, the secrets store and the notification registry all decide through it."""
