"""Reads shaped for the API and the web UI, from the read models (never from the event log, except a run
snapshot for downloads)."""
