.PHONY: up test lint setup

# Run the embedded stack: nats-server, SQLite, every service and the web UI on http://127.0.0.1:8000.
up:
	@./scripts/setup.sh
	.venv/bin/regatta up

# Run every test (unit, integration, end to end) against real NATS, Postgres, SQLite, bubblewrap and
# a Docker engine (started if needed; the containers' base image is built once per machine).
test:
	@REGATTA_SETUP_TEST_DEPS=1 ./scripts/setup.sh
	@./scripts/services.sh
	@./scripts/test-image.sh
	.venv/bin/ruff check shared services src tests bench
	.venv/bin/python -m pytest -p no:cacheprovider

lint:
	.venv/bin/ruff check shared services src tests bench
