.PHONY: up test lint setup

# Run the embedded stack: nats-server, SQLite, every service and the web UI on http://127.0.0.1:8000.
up:
	@./scripts/setup.sh
	.venv/bin/regatta up

# Run every test (unit, integration, end to end) against real NATS, Postgres, SQLite and bubblewrap.
test:
	@REGATTA_SETUP_TEST_DEPS=1 ./scripts/setup.sh
	@./scripts/services.sh
	.venv/bin/ruff check shared services src tests bench
	.venv/bin/python -m pytest -p no:cacheprovider

lint:
	.venv/bin/ruff check shared services src tests bench
