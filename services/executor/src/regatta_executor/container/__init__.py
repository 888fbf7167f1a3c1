"""The `container` environment: every attempt in its own container on a Docker engine, its image built
from the task's Dockerfile (or pulled), through the engine's API (the `docker` SDK)."""
