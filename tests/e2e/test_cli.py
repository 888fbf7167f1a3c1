"""Issue 6: our own `regatta` CLI — secrets from an env var, tokens, downloads, --json on reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.e2e.web_ui_support import ACK_WAIT
from tests.integration.registry_sync_support import commit_all, generate_registry, init_repo, write_task
from tests.support.tasks import run_toml


def regatta(stack, *args: str, token: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """The CLI as the stack's admin (or `token`'s user); in the test's workspace on a shared stack."""
    environment = {
        **os.environ,
        "REGATTA_URL": stack.url,
        "REGATTA_TOKEN": token or stack.token,
        "COLUMNS": "200",
        **({"REGATTA_WORKSPACE": stack.workspace} if getattr(stack, "workspace", None) else {}),
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "regatta.cli", *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cli_manages_secrets_tokens_and_downloads(shared_stack, api_for, tmp_path) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    api.benchmark_ready("regatta-examples")

    saved = regatta(stack, "secret", "set", "MY_KEY", "--env", "SOURCE_VAR", SOURCE_VAR="s3cr3t-value-42")
    assert saved.returncode == 0, saved.stderr
    listed = regatta(stack, "secret", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    items = json.loads(listed.stdout)["environment_secrets"]
    assert [(i["name"], i["scope"]) for i in items] == [("MY_KEY", "user")]
    assert "s3cr3t-value-42" not in listed.stdout
    missing = regatta(stack, "secret", "set", "OTHER", "--env", "UNSET_VARIABLE_X")
    assert missing.returncode == 1 and "UNSET_VARIABLE_X" in missing.stdout
    assert regatta(stack, "secret", "delete", "MY_KEY").returncode == 0
    assert json.loads(regatta(stack, "secret", "list", "--json").stdout)["environment_secrets"] == []

    created = json.loads(regatta(stack, "token", "create", "ci", "--json").stdout)
    assert regatta(stack, "run", "list", "--json", token=created["token"]).returncode == 0
    assert regatta(stack, "token", "revoke", created["id"]).returncode == 0
    refused = regatta(stack, "run", "list", "--json", token=created["token"])
    # --json: the error is JSON on stderr, stdout stays empty.
    assert refused.returncode == 1 and refused.stdout == "", refused.stdout
    assert "revoked" in json.loads(refused.stderr)["error"]["message"].lower()

    run = api.submit_toml(run_toml("regatta-examples", task_names=["hello-file", "rot13"]))
    assert api.wait_run(run["id"])["benchmark_run"]["status"] == "finished"
    shown = json.loads(regatta(stack, "run", "show", run["id"], "--json").stdout)
    assert shown["benchmark_run"]["status"] == "finished"
    out = tmp_path / "out"
    downloaded = regatta(stack, "run", "download", run["id"], "-o", str(out), "--types", "all", "--json")
    assert downloaded.returncode == 0, downloaded.stdout + downloaded.stderr
    files = {f["path"]: f["size"] for f in json.loads(downloaded.stdout)["files"]}
    assert {"summary.csv", "results.csv", "logs.txt"} <= set(files)
    assert any(path.startswith("artifacts/") for path in files)
    for path, size in files.items():
        assert (out / path).stat().st_size == size
    assert "hello-file" in (out / "results.csv").read_text()
    for command in (
        ["benchmark", "list", "--json"],
        ["run", "logs", run["id"], "--json"],
        ["token", "list", "--json"],
        ["benchmark", "show", "regatta-examples", "--json"],
    ):
        result = regatta(stack, *command)
        assert result.returncode == 0, (command, result.stdout, result.stderr)
        json.loads(result.stdout)


def test_cli_acts_in_the_workspace_it_is_given(make_stack) -> None:
    stack = make_stack(executors=1)

    def listed(*args: str, token: str | None = None, **env: str) -> list[tuple[str, str, bool]]:
        result = regatta(stack, *args, "workspace", "list", "--json", token=token, **env)
        assert result.returncode == 0, result.stdout + result.stderr
        return [(w["name"], w["role"], w["current"]) for w in json.loads(result.stdout)["workspaces"]]

    created = regatta(stack, "workspace", "create", "team-b", "--json")
    assert created.returncode == 0, created.stdout + created.stderr
    assert json.loads(created.stdout)["role"] == "admin"
    (default,) = [name for name, _, current in listed() if current]
    assert sorted(listed()) == sorted([(default, "admin", True), ("team-b", "admin", False)])
    assert ("team-b", "admin", True) in listed("--workspace", "team-b")
    assert ("team-b", "admin", True) in listed(REGATTA_WORKSPACE="team-b")

    saved = regatta(
        stack,
        "--workspace",
        "team-b",
        "secret",
        "set",
        "TEAM_KEY",
        "--env",
        "V",
        "--scope",
        "workspace",
        V="x1",
    )
    assert saved.returncode == 0, saved.stdout + saved.stderr
    in_team_b = json.loads(regatta(stack, "--workspace", "team-b", "secret", "list", "--json").stdout)
    in_default = json.loads(regatta(stack, "secret", "list", "--json").stdout)
    assert [s["name"] for s in in_team_b["environment_secrets"]] == ["TEAM_KEY"]
    assert in_default["environment_secrets"] == []

    added = regatta(stack, "workspace", "add-member", "team-b", "bob@example.com", "--issue-token", "--json")
    assert added.returncode == 0, added.stdout + added.stderr
    bob = json.loads(added.stdout)["token"]
    assert listed(token=bob) == [("team-b", "member", True)]
    members = regatta(stack, "workspace", "members", "team-b", "--json", token=bob)
    assert members.returncode == 0, members.stdout + members.stderr
    assert [(m["email"], m["role"]) for m in json.loads(members.stdout)["members"]] == [
        ("admin@localhost", "admin"),
        ("bob@example.com", "member"),
    ]
    refused = regatta(stack, "--workspace", default, "benchmark", "list", token=bob)
    assert refused.returncode == 1 and "Workspace not found or not accessible" in refused.stdout

    # Administering it: a role, a new name, a member removed, the workspace deleted.
    promoted = regatta(stack, "workspace", "set-role", "team-b", "bob@example.com", "admin", "--json")
    assert promoted.returncode == 0 and json.loads(promoted.stdout)["role"] == "admin", promoted.stdout
    renamed = regatta(stack, "workspace", "rename", "team-b", "team-c")
    assert renamed.returncode == 0, renamed.stdout + renamed.stderr
    assert listed(token=bob) == [("team-c", "admin", True)]
    removed = regatta(stack, "workspace", "remove-member", "team-c", "admin@localhost", token=bob)
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert [name for name, *_ in listed()] == [default]
    deleted = regatta(stack, "workspace", "delete", "team-c", "--json", token=bob)
    assert deleted.returncode == 0 and json.loads(deleted.stdout)["deleted"] is True, deleted.stdout
    gone = regatta(stack, "workspace", "list", token=bob)
    assert gone.returncode == 1 and "Workspace not found" in gone.stdout


def test_cli_adds_benchmarks_from_a_registry_a_folder_and_a_git_repository(
    make_stack, api_for, tmp_path
) -> None:
    stack = make_stack(executors=1, REGATTA_MAX_MEMORY_MB="16384")
    api = api_for(stack)
    repo = tmp_path / "repo"
    init_repo(repo)
    for index, name in enumerate(("alpha", "beta")):
        write_task(repo / "tasks" / name, index)
    commit = commit_all(repo, "first")
    registry = generate_registry(tmp_path / "catalogue", 3, dataset="generated", version="2.0")

    for args in (
        ("--git", str(repo), "--ref", "main", "--name", "from-git"),
        ("generated@2.0", "--registry", str(registry), "--name", "from-registry"),
        (str(repo / "tasks"), "--folder", "--name", "from-folder"),
    ):
        added = regatta(stack, "benchmark", "add", *args)
        assert added.returncode == 0, (args, added.stdout, added.stderr)
    shown = {}
    for name in ("from-git", "from-registry", "from-folder"):
        assert api.benchmark_ready(name)["sync_status"] == "ready", name
        shown[name] = json.loads(regatta(stack, "benchmark", "show", name, "--json").stdout)["benchmark"]
    assert (shown["from-git"]["source_type"], shown["from-git"]["source_commit"]) == ("git", commit)
    assert (shown["from-registry"]["source_type"], shown["from-registry"]["version"]) == ("registry", "2.0")
    assert shown["from-folder"]["source_type"] == "folder"
    assert [shown[n]["task_count"] for n in ("from-git", "from-registry", "from-folder")] == [2, 3, 2]

    # Invalid tasks are listed with their reasons, as plain text (a reason's "[environment]" is no markup).
    mixed = tmp_path / "mixed"
    for index, name in enumerate(("bad", "big", "ok")):
        write_task(mixed / name, index)
    (mixed / "bad" / "instruction.md").unlink()
    with (mixed / "big" / "task.toml").open("a") as toml:
        toml.write("[environment]\nmemory_mb = 1048576\n")
    assert regatta(stack, "benchmark", "add", str(mixed), "--folder", "--name", "mixed").returncode == 0
    assert api.benchmark_ready("mixed")["task_count"] == 1
    listed = regatta(stack, "benchmark", "show", "mixed")
    assert listed.returncode == 0, listed.stderr
    assert "task 'bad': instruction.md is missing" in listed.stdout, listed.stdout
    assert (
        "task 'big': [environment].memory_mb = 1048576 exceeds the operator's ceiling of 16384 "
        "(REGATTA_MAX_MEMORY_MB)"
    ) in listed.stdout, listed.stdout

    before = len(api.get("/benchmarks")["benchmarks"])
    for args, named in (
        (("generated", "--ref", "v1", "--registry", str(registry)), "--ref"),
        (("--folder",), "--folder"),
        ((), "DATASET"),
    ):
        refused = regatta(stack, "benchmark", "add", *args)
        assert refused.returncode == 2 and named in refused.stderr, (args, refused.stderr)
    # A bare name is looked up in the server's default registry (Harbor's here, out of this machine's
    # reach or without such a dataset): the server's answer says which, and nothing is added.
    plain = regatta(stack, "benchmark", "add", "plain-name")
    assert plain.returncode == 1 and "default registry" in plain.stdout, plain.stdout
    assert len(api.get("/benchmarks")["benchmarks"]) == before

    # The same source and version again: refused, naming the benchmark that has it.
    again = regatta(stack, "benchmark", "add", "generated@2.0", "--registry", str(registry))
    assert again.returncode == 1, (again.stdout, again.stderr)
    assert "'from-registry'" in again.stdout and "sync it instead" in again.stdout, again.stdout
    # A folder that is not there: refused before anything reaches the server.
    missing = regatta(stack, "benchmark", "add", str(tmp_path / "no-such-folder"), "--folder")
    assert missing.returncode == 2 and "is not a folder" in missing.stderr, missing.stderr
    assert len(api.get("/benchmarks")["benchmarks"]) == before

    # Bad run files: a missing one in one line, a wrong value in the file's own terms and line.
    runs_before = api.get("/runs")["total_count"]
    absent = regatta(stack, "run", "submit", str(tmp_path / "missing.toml"))
    assert absent.returncode == 2 and "Traceback" not in absent.stderr + absent.stdout, absent.stderr
    assert "cannot read" in absent.stderr and "missing.toml" in absent.stderr, absent.stderr

    bad = tmp_path / "bad.toml"
    lines = run_toml("from-folder", attempts=1).splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("attempts_per_task"))
    lines[at] = "attempts_per_task = 0"
    bad.write_text("\n".join(lines) + "\n")
    refused = regatta(stack, "run", "submit", str(bad))
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert f"[execution] attempts_per_task (line {at + 1})" in refused.stdout, refused.stdout
    assert "execution_config" not in refused.stdout
    assert api.get("/runs")["total_count"] == runs_before
