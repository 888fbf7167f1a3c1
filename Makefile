.PHONY: up test lint setup

# Run the embedded stack: nats-server, SQLite, every service and the web UI on http://127.0.0.1:8000.
up:
	@./scripts/setup.sh
	.venv/bin/regatta up

# Parallel pytest workers: most of a test's time is spent waiting on processes, so more workers than
# cores pay off (docs/performance.md, "Test suite").
TEST_WORKERS ?= 4

# Run every test (unit, integration, end to end) against real NATS, Postgres, SQLite, bubblewrap and
# a Docker engine (started if needed). The tests' Postgres and NATS run in containers of their own, from
# images built on this machine (the base image once, the service images when their content changes).
# Tests marked `serial` assert machine-wide state (firewall rules, ipsets), so they run alone after the
# parallel phase; both phases always run, and either one failing fails the target.
test:
	@REGATTA_SETUP_TEST_DEPS=1 ./scripts/setup.sh
	@./scripts/services.sh
	@./scripts/test-image.sh
	.venv/bin/ruff check shared services src tests bench
	@rm -rf .test-reports
	status=0; started=$$(date +%s); \
	.venv/bin/python -m pytest -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile -m "not serial" \
		--junitxml=.test-reports/parallel.xml || status=$$?; \
	parallel=$$(date +%s); \
	.venv/bin/python -m pytest -p no:cacheprovider -m serial --junitxml=.test-reports/serial.xml || status=$$?; \
	echo "make test: parallel phase $$((parallel - started)) s, serial phase $$(($$(date +%s) - parallel)) s"; \
	.venv/bin/python scripts/test-times.py .test-reports/parallel.xml .test-reports/serial.xml; \
	exit $$status

lint:
	.venv/bin/ruff check shared services src tests bench
