"""A default registry (REGATTA_DEFAULT_REGISTRY) as a local registry.json whose datasets really sync: tiny
Harbor tasks whose reference solutions pass, listed under a few names, versions and descriptions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.tasks import write_task

DATASETS: list[dict[str, Any]] = [
    {"name": "tiny-bench", "version": "1.0", "description": "Three tiny tasks that write a file", "tasks": 3},
    {"name": "tiny-bench", "version": "0.9", "description": "The first tiny task alone", "tasks": 1},
    {
        "name": "hello-bench",
        "version": "2.0",
        "description": "Two greetings, checked by a script",
        "tasks": 2,
    },
    {
        "name": "long-description-bench",
        "version": "2026.11.30-rc.1",
        "description": "A dataset whose description runs on: " + "many words that wrap on a phone " * 8,
        "tasks": 1,
    },
]


def write_default_registry(root: Path, datasets: list[dict[str, Any]] = DATASETS) -> Path:
    """`root/registry.json` listing `datasets`, each task a folder under `root/tasks`."""
    most = max(d["tasks"] for d in datasets)
    for index in range(most):
        write_task(root / "tasks", f"t{index}")
    rows = [
        {
            "name": d["name"],
            "version": d["version"],
            "description": d["description"],
            "tasks": [{"name": f"t{i}", "path": f"tasks/t{i}"} for i in range(d["tasks"])],
        }
        for d in datasets
    ]
    registry = root / "registry.json"
    registry.write_text(json.dumps(rows))
    return registry
