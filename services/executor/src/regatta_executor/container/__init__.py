"""The container environment: each attempt in its own container on a Docker engine."""
