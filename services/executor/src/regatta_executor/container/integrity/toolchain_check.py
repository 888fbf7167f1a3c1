"""The tool chain's check once the agent's turn is over (verifier_turn.py): its evidence recorded (what
changed against the image and what explains it, toolchain.py); under `enforce` an unexplained change
fails the attempt, and Python byte-code caches the turn left are removed (Python rebuilds them)."""

from __future__ import annotations

import time
from pathlib import Path

import docker
from docker.errors import DockerException

from regatta_executor.attempt.integrity_record import IntegrityLog
from regatta_executor.attempt.sandbox_faults import SandboxTamperedError
from regatta_executor.container import janitor
from regatta_executor.container.engine import LABEL_MANAGED
from regatta_executor.container.exec import commands as execs
from regatta_executor.container.exec import tools
from regatta_executor.container.integrity import toolchain


async def check_tool_chain(
    api: docker.APIClient,
    container: str,
    image_id: str,
    *,
    owners_dir: Path,
    created_at: float,
    enforced: bool,
    integrity: IntegrityLog,
) -> None:
    labels = {LABEL_MANAGED: "1", **janitor.ownership_labels(owners_dir)}
    minutes = toolchain.container_minutes(created_at, time.time())
    try:
        found = await execs.in_thread(toolchain.evidence, api, container, image_id, labels, minutes=minutes)
    except (SandboxTamperedError, DockerException) as exc:
        if enforced:
            raise SandboxTamperedError(str(exc)) from exc
        integrity.not_checked(f"the tool chain could not be read: {exc}")
        return
    integrity.tool_chain(found.changes)
    if not enforced:
        return
    unexplained = found.unexplained
    if unexplained:
        raise SandboxTamperedError(
            "the agent changed the verifier's tool chain and nothing in the container explains it "
            f"(verifier_integrity = 'enforce'): {toolchain.describe(unexplained)}"
        )
    for start in range(0, len(found.bytecode), 500):
        argv = tools.platform_shell('rm -f -- "$@"', *found.bytecode[start : start + 500])
        await execs.in_thread(execs.run_platform, api, container, argv)
