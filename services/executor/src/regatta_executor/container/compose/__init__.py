"""A task's docker-compose.yaml: read and merged as Docker Compose does, checked against what the
container environment runs, and its sidecars run on the engine."""
