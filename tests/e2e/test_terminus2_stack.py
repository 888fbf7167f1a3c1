"""terminus-2 through the running stack: a run with an endpoint model whose key is a stored secret.
The gateway seals it into the run, the executor unseals it and hands it to the harness; tokens and cost
are recorded, and the secret's value appears in no event (artifact redaction: test_terminus2.py)."""

from __future__ import annotations

import json
import shutil

import pytest
from sqlalchemy import create_engine, text

from tests.conftest import EXAMPLES
from tests.support.scripted_llm import ScriptedLLM, terminus_reply

API_KEY = "sk-stack-" + "5e1d9b7c3a2f4e68"


def test_terminus2_run_with_a_sealed_key_records_tokens_and_cost(make_stack, api_for, tmp_path) -> None:
    tasks = tmp_path / "tasks"
    shutil.copytree(EXAMPLES / "tasks" / "hello-file", tasks / "hello-file")
    # The executor's first terminus-2 attempt loads litellm (seconds of CPU); on a loaded 2-core machine
    # the task's 60 s agent timeout is too tight to be a fair test of anything here.
    toml = tasks / "hello-file" / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_sec = 60", "timeout_sec = 300"))
    script = [
        terminus_reply(["printf 'Hello, Regatta!\\n' > /app/hello.txt\n"], duration=2.0),
        terminus_reply(["cat /app/hello.txt\n"], duration=1.0),
        terminus_reply(task_complete=True),
        terminus_reply(task_complete=True),
    ]
    # A stack of its own, at the default ack wait: a redelivered copy of the attempt (the shared stacks'
    # short ack wait, on a loaded host) would take replies from the same scripted model.
    stack = make_stack(executors=1)
    api = api_for(stack)
    response = api.http.post(
        "/api/v1/benchmarks", json={"source_type": "folder", "path": str(tasks), "name": "t2"}
    )
    assert response.status_code == 201, response.text
    assert api.benchmark_ready("t2")["sync_status"] == "ready"

    stored = api.http.post("/api/v1/secrets", json={"name": "SCRIPTED_KEY", "value": API_KEY})
    assert stored.status_code == 201, stored.text

    with ScriptedLLM(script, prompt_tokens=1000, completion_tokens=50) as llm:
        body = {
            "experiment_config": {"benchmark": "t2"},
            "agents": [
                {
                    "harness": "terminus-2",
                    "model": {
                        "type": "endpoint",
                        "base_url": llm.base_url,
                        "model": "gpt-4o-mini",
                        "api_key_secret": "SCRIPTED_KEY",
                    },
                }
            ],
        }
        created = api.http.post("/api/v1/runs", json=body)
        assert created.status_code == 201, created.text
        run_id = created.json()["id"]
        detail = api.wait_run(run_id, timeout=240)
        authorizations = set(llm.authorizations)
        calls = llm.calls

    assert detail["benchmark_run"]["status"] == "finished"
    assert authorizations == {f"Bearer {API_KEY}"}

    engine = create_engine(stack.database_url)
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT type, data FROM events WHERE stream_id = :s ORDER BY position"),
            {"s": f"run-{run_id}"},
        ).all()
    engine.dispose()
    events = [(kind, data if isinstance(data, dict) else json.loads(data)) for kind, data in rows]
    assert all(API_KEY not in json.dumps(data) for _, data in events), "no secret in the event log"
    (finished,) = [data for kind, data in events if kind == "AttemptFinished"]
    if finished["outcome"] != "passed":
        pytest.fail(
            f"{finished['outcome']}: {finished['exception_type']} {finished['exception_message']}, "
            f"{calls} model calls\n{api.artifact_texts(run_id)}"
        )
    usage = finished["usage"]
    # Every call is billed 1000 in / 50 out; how many of them terminus-2 counts depends on its turns.
    turns = usage["input_tokens"] // 1000
    assert 3 <= turns <= calls
    assert (usage["input_tokens"], usage["output_tokens"]) == (turns * 1000, turns * 50)
    assert usage["cost_usd"] > 0
    assert finished["artifacts"], "the trial's files were uploaded"
