"""Small Harbor tasks made on the fly for tests (a folder of tasks is a benchmark source)."""

from __future__ import annotations

import textwrap
from pathlib import Path


def write_task(
    root: Path,
    name: str,
    *,
    solve: str = "echo done > /app/out.txt",
    category: str = "general",
    agent_timeout: float = 60,
    verifier_timeout: float = 60,
    network: str = "no-network",
) -> Path:
    task = root / name
    for folder in ("tests", "solution", "environment"):
        (task / folder).mkdir(parents=True, exist_ok=True)
    (task / "task.toml").write_text(
        f'[metadata]\ncategory = "{category}"\n[agent]\ntimeout_sec = {agent_timeout}\n'
        f'[verifier]\ntimeout_sec = {verifier_timeout}\n[environment]\nnetwork_mode = "{network}"\n'
    )
    (task / "instruction.md").write_text("Write done to /app/out.txt\n")
    (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (task / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{solve}\n")
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\nif grep -q done /app/out.txt 2>/dev/null; then echo 1; else echo 0; fi"
        " > /logs/verifier/reward.txt\n"
    )
    return task


def write_tasks(
    root: Path, count: int, *, prefix: str = "task", sleep: float = 0.0, **options: object
) -> Path:
    for index in range(count):
        solve = (f"sleep {sleep}\n" if sleep else "") + "echo done > /app/out.txt"
        write_task(root, f"{prefix}-{index}", solve=solve, **options)  # type: ignore[arg-type]
    return root


def run_toml(
    benchmark: str,
    *,
    agents: tuple[str, ...] = ("oracle",),
    attempts: int = 1,
    concurrency: int = 4,
    retries: int = 0,
    task_names: list[str] | None = None,
) -> str:
    lines = [f'[experiment]\nbenchmark = "{benchmark}"\n']
    if task_names:
        lines.append("[tasks]\ntask_names = [" + ", ".join(f'"{n}"' for n in task_names) + "]\n")
    for index, harness in enumerate(agents):
        lines.append(
            f'[[agents]]\nharness = "{harness}"\n[agents.model]\ntype = "hosted"\n'
            f'base_model = "model-{index}"\n'
        )
    lines.append(
        f"[execution]\nattempts_per_task = {attempts}\nmax_concurrent_attempts = {concurrency}\n"
        f"max_retries = {retries}\n"
    )
    return "\n".join(lines)


STEPS = ("first", "second%")  # Harbor's step names may hold a '%', which download paths do not


def two_step_task(parent: Path) -> Path:
    """A task of two steps (the second's name holds a '%', which download paths replace), each writing
    its agent log, verifier output and an artifact."""
    task = parent / "two-steps"
    (task / "environment").mkdir(parents=True)
    (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (task / "instruction.md").write_text("Two steps.\n")
    toml = '[environment]\nnetwork_mode = "no-network"\n'
    for step in STEPS:
        toml += textwrap.dedent(
            f"""
            [[steps]]
            name = "{step}"
            artifacts = ["/app/{step}.txt"]
            [steps.agent]
            timeout_sec = 60
            [steps.verifier]
            timeout_sec = 60
            """
        )
        folder = task / "steps" / step
        for sub in ("solution", "tests"):
            (folder / sub).mkdir(parents=True)
        (folder / "instruction.md").write_text(f"Step {step}.\n")
        (folder / "solution" / "solve.sh").write_text(
            f"#!/bin/bash\necho 'made by {step}' > '/app/{step}.txt'\n"
            f"echo 'agent of {step}' > /logs/agent/note.txt\n"
        )
        (folder / "tests" / "test.sh").write_text(
            f"#!/bin/bash\necho 'verified {step}' > /logs/verifier/seen.txt\n"
            f"grep -q 'made by {step}' '/app/{step}.txt' && echo 1 > /logs/verifier/reward.txt"
            " || echo 0 > /logs/verifier/reward.txt\n"
        )
    (task / "task.toml").write_text(toml)
    return task
