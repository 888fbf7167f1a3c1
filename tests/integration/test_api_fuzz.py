"""Issue 8: schemathesis against /openapi.json — every operation, valid and invalid bodies: no 5xx and
no response that breaks its own schema."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from regatta_gateway.app import create_app
from regatta_shared.settings import Settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error, response_schema_conformance

from regatta import nats_server

TOKEN = "fuzz-token"


@pytest.fixture(scope="module")
def gateway_url(tmp_path_factory: pytest.TempPathFactory, nats_url: str) -> Iterator[str]:
    data = tmp_path_factory.mktemp("fuzz")
    port = nats_server.free_port()
    registry = Path(data) / "registry.json"
    registry.write_text('[{"name": "fuzz-bench", "version": "1.0", "description": "", "tasks": []}]')
    settings = Settings(
        NATS_URL=nats_url,
        DATABASE_URL=f"sqlite:///{Path(data) / 'events.db'}",
        REGATTA_DATA_DIR=data,
        REGATTA_BOOTSTRAP_TOKEN=TOKEN,
        REGATTA_GATEWAY_PORT=port,
        # A local one: an unreachable default registry is a 503 by design, not a server error to find.
        REGATTA_DEFAULT_REGISTRY=str(registry),
    )
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="error")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    yield url
    server.should_exit = True
    thread.join(timeout=30)


def test_no_operation_errors_or_breaks_its_schema(gateway_url: str) -> None:
    schema = schemathesis.openapi.from_url(f"{gateway_url}/openapi.json")
    headers = {"Authorization": f"Bearer {TOKEN}"}
    tested = []
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=operation.as_strategy(generation_mode=mode, headers=headers))
            @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), database=None)
            def call(case) -> None:
                case.call_and_validate(
                    base_url=gateway_url, checks=[not_a_server_error, response_schema_conformance]
                )

            try:
                call()
            except Unsatisfiable:
                # An operation with nothing to corrupt (no parameters, no body) has no negative cases.
                assert mode is GenerationMode.NEGATIVE, operation.label
        tested.append(operation.label)
    assert len(tested) >= 10, tested
