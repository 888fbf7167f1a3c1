"""Invariant 6 end to end: secret values appear nowhere but inside the sandbox (issue 8 item 4).

A real run on the running stack uses a workspace secret, a personal secret and a run-supplied one
(`secrets.provided`). Afterwards every row of every table, every file under the stack's data dir (service
logs, the JetStream store, executor work dirs), every API response about the run and its benchmark (REST,
the CLI contract, SSE, the web pages) and every download are scanned for the values: none may appear.
The run's data key is gone once it ended, so its sealed blob in the event log opens with nothing.
(That the values do reach the sandbox is the executor's end-to-end test.)
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import shlex
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote_to_bytes

import httpx
import nats
import pytest
from regatta_shared.messaging.bus import ARTIFACTS_BUCKET
from regatta_shared.security.sealing import SealError, sealing_key, unseal
from regatta_shared.settings import Settings
from sqlalchemy import create_engine, text

from regatta.stack import Stack
from tests.e2e.test_executor import add_folder, run_events
from tests.support.tasks import write_task

# Values whose encodings differ from the value: quotes, backslashes, shell metacharacters, unicode.
WORKSPACE_VALUE = 'ws-"scan\\7d2c-ünï€-41f09b3e'
PERSONAL_VALUE = "personal'scan\\3e8a-ß✓-55c1d0f7"
PROVIDED_VALUE = 'provided$scan`b61f"0e2a-é94c8 x'
VALUES = (WORKSPACE_VALUE, PERSONAL_VALUE, PROVIDED_VALUE)
TASKS = ["leak-0", "leak-1"]

# Run by the agent (the oracle's solve.sh) and by the verifier (test.sh): every secret it can see,
# written in every encoding to its log, its artifacts and stdout, and a result.json-like env record.
LEAK_SCRIPT = r"""python3 - "$1" <<'PY'
import base64, json, os, shlex, sys, urllib.parse
lines = []
for name, value in sorted(os.environ.items()):
    if not name.startswith("SCAN_") and name != "OPENAI_API_KEY":
        continue
    raw = value.encode()
    lines += [value, json.dumps(value), json.dumps(value, ensure_ascii=False)]
    lines += [urllib.parse.quote(value, safe=""), urllib.parse.quote_plus(value), shlex.quote(value)]
    for prefix in (b"", b"a", b"ab"):
        lines += [base64.b64encode(prefix + raw + b"!").decode()]
        lines += [base64.urlsafe_b64encode(prefix + raw).decode()]
    lines += [value[:4] + "****" + value[-3:], "********" + value[-4:]]
    lines += [json.dumps({"env": {name: value}}), f"export {name}={shlex.quote(value)}"]
text = "\n".join(lines) + "\n"
sys.stdout.write(text)
for folder in sys.argv[1].split(":"):
    try:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "encodings.txt"), "a") as out:
            out.write(text)
    except OSError:
        pass
PY
"""


def write_leaky_tasks(root: Path) -> Path:
    for name in TASKS:
        task = write_task(
            root,
            name,
            solve=LEAK_SCRIPT.replace('"$1"', "/logs/agent:/logs/artifacts") + "echo done > /app/out.txt",
        )
        verify = (task / "tests" / "test.sh").read_text()
        (task / "tests" / "test.sh").write_text(verify + LEAK_SCRIPT.replace('"$1"', "/logs/verifier"))
    return root


def _submission() -> dict[str, Any]:
    hosted = {"type": "hosted", "base_model": "none", "lora_model_name": "none"}
    return {
        "name": "secret-scan",
        "experiment_config": {"benchmark": "leaky"},
        "tasks_config": {"task_names": TASKS},
        "agents": [
            {
                "harness": "oracle",
                "model": {"type": "provider", "model": "openai/gpt-4o-mini", "api_key_secret": "SCAN_WS_KEY"},
            },
            {"harness": "nop", "model": hosted},
        ],
        "execution_config": {"attempts_per_task": 1, "verifier_secrets": ["SCAN_PERSONAL_KEY"]},
        "secrets": {"required": ["SCAN_RUN_ONLY"], "provided": {"SCAN_RUN_ONLY": PROVIDED_VALUE}},
    }


_JSON_ESCAPE = re.compile(rb'\\(u[0-9a-fA-F]{4}|["\\/bfnrt])')
_BASE64_RUN = re.compile(rb"[A-Za-z0-9+/_-]{12,}={0,2}")


def _json_unescaped(blob: bytes) -> bytes:
    def one(match: re.Match[bytes]) -> bytes:
        escape = match[1]
        if escape.startswith(b"u"):
            return chr(int(escape[1:], 16)).encode("utf-8", "surrogatepass")
        return {b"b": b"\b", b"f": b"\f", b"n": b"\n", b"r": b"\r", b"t": b"\t"}.get(escape, escape)

    # Applied twice: a JSON string inside a JSON string (an env record in a log line).
    return _JSON_ESCAPE.sub(one, _JSON_ESCAPE.sub(one, blob))


def _base64_decoded(blob: bytes) -> bytes:
    """What every base64-looking run in `blob` decodes to, at each of the 4 character alignments."""
    decoded = []
    for run in _BASE64_RUN.findall(blob):
        run = run.rstrip(b"=").replace(b"-", b"+").replace(b"_", b"/")
        for skip in range(4):
            part = run[skip:]
            part = part[: len(part) - len(part) % 4]
            decoded.append(base64.b64decode(part + b"=" * (-len(part) % 4)))
    return b"\n".join(decoded)


def _leaks(data: bytes | str) -> list[str]:
    """Each secret found in `data`, with the encoding it was found in. The decodings are the test's
    own (not the executor's redaction), so an encoding the redaction misses is caught."""
    blob = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
    views = {
        "raw": blob,
        "json": _json_unescaped(blob),
        "url": unquote_to_bytes(blob),
        "url+": unquote_to_bytes(blob.replace(b"+", b" ")),
        "base64": _base64_decoded(blob),
    }
    found = []
    for value in VALUES:
        needles = {"value": value, "shell": shlex.quote(value)}
        needles |= {"harbor mask": value[:4] + "****" + value[-3:], "auth mask": "****" + value[-4:]}
        for view, haystack in views.items():
            found += [
                f"{value!r} as {kind} in {view}" for kind, n in needles.items() if n.encode() in haystack
            ]
    return found


def _database_rows(stack: Stack) -> dict[str, list[str]]:
    """Every row of every table of the stack's database, each as Postgres' text form of the record."""
    engine = create_engine(stack.database_url or "")
    try:
        with engine.connect() as conn:
            tables = conn.execute(
                text(
                    "SELECT table_schema, table_name FROM information_schema.tables "
                    "WHERE table_type = 'BASE TABLE' "
                    "AND table_schema NOT IN ('pg_catalog', 'information_schema')"
                )
            ).all()
            return {
                f"{schema}.{name}": list(
                    conn.execute(text(f'SELECT CAST(t AS text) FROM "{schema}"."{name}" AS t')).scalars()
                )
                for schema, name in tables
            }
    finally:
        engine.dispose()


def _wait(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError(what)


def _responses(stack: Stack, run_id: str, benchmark_id: str) -> list[httpx.Response]:
    """What a user can see of the run and its benchmark: REST, CLI contract, SSE, web pages, downloads."""
    auth = {"Authorization": f"Bearer {stack.token}"}
    cli = {**auth, "X-Osmosis-Workspace": "default"}
    got: list[httpx.Response] = []
    with httpx.Client(base_url=stack.url, timeout=30.0) as http:
        for path in (
            "/runs",
            f"/runs/{run_id}",
            "/runs/secret-scan",
            f"/runs/{run_id}/attempts",
            f"/runs/{run_id}/logs?limit=200",
            f"/runs/{run_id}/stream",
            f"/runs/{run_id}/downloads?types=all",
            "/benchmarks",
            f"/benchmarks/{benchmark_id}",
            f"/benchmarks/{benchmark_id}/leaderboard",
            f"/benchmarks/{benchmark_id}/stream",
            "/secrets?scope=all",
            "/audit?limit=500",
            "/tokens",
        ):
            got.append(http.get(f"/api/v1{path}", headers=auth))
        for path in (
            "/benchmark-runs",
            f"/benchmark-runs/{run_id}",
            f"/benchmark-runs/{run_id}/logs?limit=200&direction=older",
            f"/benchmark-runs/{run_id}/outputs/manifest?types=summary,results,artifacts,logs",
            "/benchmarks",
            f"/benchmarks/{benchmark_id}",
            "/environment-secrets?scope=all",
        ):
            got.append(http.get(f"/api/cli{path}", headers=cli))
        manifest = next(r for r in got if "/downloads" in r.request.url.path).json()
        assert {f["path"] for f in manifest["files"]} >= {"summary.csv", "results.csv", "logs.txt"}
        assert any(f["path"].startswith("artifacts/") for f in manifest["files"])
        got += [http.get(item["url"]) for item in manifest["files"]]
        cli_urls = http.post(
            f"/api/cli/benchmark-runs/{run_id}/outputs/download-urls",
            headers=cli,
            json={"items": [{"path": f["path"], "token": f["token"]} for f in manifest["files"]]},
        )
        got += [cli_urls, *(http.get(item["url"]) for item in cli_urls.json()["items"])]
        http.cookies.set("regatta_token", stack.token)
        for page in (
            "/benchmarks",
            f"/benchmarks/{benchmark_id}",
            f"/benchmarks/{benchmark_id}/runs/new",
            "/secrets",
            *(
                f"/benchmarks/runs/{run_id}?tab={tab}"
                for tab in ("overview", "results", "configuration", "logs")
            ),
        ):
            got.append(http.get(page))
    return got


def test_secret_values_appear_nowhere_after_a_real_run(make_stack, api_for, tmp_path) -> None:
    stack = make_stack(executors=1)
    api = api_for(stack)
    benchmark = add_folder(api, write_leaky_tasks(tmp_path / "tasks"), "leaky")
    for name, value, scope in (
        ("SCAN_WS_KEY", WORKSPACE_VALUE, "workspace"),
        ("SCAN_PERSONAL_KEY", PERSONAL_VALUE, "user"),
    ):
        saved = api.http.post("/api/v1/secrets", json={"name": name, "value": value, "scope": scope})
        assert saved.status_code == 201 and not _leaks(saved.text), saved.text
    created = api.http.post("/api/v1/runs", json=_submission())
    assert created.status_code == 201 and not _leaks(created.text), created.text
    run_id = created.json()["id"]
    seen_running: list[httpx.Response] = []  # the run's page while it runs is scanned too

    def ended() -> dict[str, Any] | None:
        seen_running.append(api.http.get(f"/api/v1/runs/{run_id}"))
        detail = seen_running[-1].json()
        return detail if detail["benchmark_run"]["status"] in ("finished", "failed", "stopped") else None

    detail = _wait(ended, 240, "the run did not end")
    assert detail["benchmark_run"]["status"] == "finished", detail
    # The executor opened the run's secrets (no SealError): the oracle solved its tasks.
    attempts = api.get(f"/runs/{run_id}/attempts")["attempts"]
    assert sorted(a["outcome"] for a in attempts if a["agent_index"] == 0) == ["passed"] * len(TASKS), (
        attempts
    )

    # The run ended: the scheduler deleted its data key, so the blob in the log is noise for good.
    engine = create_engine(stack.database_url or "")
    try:

        def key_left() -> int:
            with engine.connect() as conn:
                return conn.execute(
                    text("SELECT count(*) FROM run_keys WHERE run_id = :r"), {"r": run_id}
                ).scalar_one()

        _wait(lambda: key_left() == 0, 30, "the run's key was not purged after it ended")
        with engine.connect() as conn:
            blob = conn.execute(
                text(
                    "SELECT data->>'sealed_secrets' FROM events "
                    "WHERE type = 'RunSubmitted' AND stream_id = :s"
                ),
                {"s": f"run-{run_id}"},
            ).scalar_one()
    finally:
        engine.dispose()
    assert blob.startswith("run1.")
    with pytest.raises(SealError):
        unseal(blob, sealing_key(Settings(REGATTA_DATA_DIR=stack.data_dir, REGATTA_MASTER_KEY=None)))

    # 1. Every row of every table: values only as ciphertext.
    rows = _database_rows(stack)
    assert {"public.events", "public.secret_values", "public.run_keys", "public.rm_runs"} <= set(rows)
    assert len(rows["public.secret_values"]) == 2 and not rows["public.run_keys"]
    leaked_rows = {table: [r[:200] for r in found if _leaks(r)] for table, found in rows.items()}
    assert not {t: r for t, r in leaked_rows.items() if r}, leaked_rows
    assert sum(len(found) for found in rows.values()) > 50, "the scan saw the database"

    # 2. Every file under the data dir: service logs, the JetStream store, executor work dirs.
    files = [p for p in stack.data_dir.rglob("*") if p.is_file()]
    assert any(p.parent == stack.logs and p.suffix == ".log" for p in files)
    assert any("nats" in p.parts for p in files), "the JetStream store was scanned"
    leaked_files = [str(p.relative_to(stack.data_dir)) for p in files if _leaks(_read(p))]
    assert not leaked_files, leaked_files

    # 3. Every stored artifact. The agents and verifiers did write every encoding of the secrets they
    # saw (so the scan has something to miss): each encodings.txt came out fully redacted.
    stored = asyncio.run(_stored_artifacts(stack))
    leaked_objects = {name: _leaks(data) for name, data in stored.items()}
    assert not {name: found for name, found in leaked_objects.items() if found}, leaked_objects
    finished = [data for kind, data in run_events(stack, run_id) if kind == "AttemptFinished"]
    paths = {ref["path"]: ref["digest"] for data in finished for ref in data["artifacts"]}
    for path in ("agent/encodings.txt", "verifier/encodings.txt"):
        assert path in paths, sorted(paths)
        written = stored[paths[path]].decode()
        assert written.count("[REDACTED]") >= 14 and "****" not in written, written[:500]
    recorded = json.loads(stored[paths["result.json"]])
    assert set(recorded["config"]["agent"]["env"].values()) == {"[REDACTED]"}, "env values stripped"
    assert "SCAN_WS_KEY" in recorded["config"]["agent"]["env"], "env names kept"

    # 4. Every response a user can get about the run and its benchmark, and every download.
    responses = seen_running + _responses(stack, run_id, benchmark["id"])
    assert len(responses) > 40
    for response in responses:
        assert response.status_code == 200, (response.request.url, response.text[:300])
        assert not _leaks(response.content), response.request.url


async def _stored_artifacts(stack: Stack) -> dict[str, bytes]:
    """Every object in the artifact bucket (what downloads are made of), by name."""
    nc = await nats.connect(stack.nats_url or "")
    try:
        store = await nc.jetstream().object_store(ARTIFACTS_BUCKET)
        return {info.name: (await store.get(info.name)).data or b"" for info in await store.list()}
    finally:
        await nc.close()


def _read(path: Path) -> bytes:
    """A file that cannot be read fails the scan (its content is unknown, not clean); only a file
    removed while the scan ran (a rotated log, a finished sandbox) counts as empty."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""
