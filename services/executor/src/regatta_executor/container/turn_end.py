"""The execs that end the agent's turn in a shared container (verifier_turn.py decides when), each of the
platform's shell as root, and the restart that precedes them under `enforce`.

Every engine round trip costs tens of milliseconds of the engine's CPU, so the turn ends in one exec that
also does the transfer at hand: where Harbor reads the agent's logs back after the turn (outside
scoped_exec_env), it archives /logs on its output (`end_reading_logs`); otherwise Harbor's removal of
stale reward files starts the verifier, and the exec runs with the next operation, writing the uploads
made meanwhile (the tests) from its input (`end_writing_uploads`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Protocol

from docker import DockerClient
from docker.errors import DockerException

from regatta_executor.attempt.integrity_record import IntegrityLog
from regatta_executor.attempt.sandbox_faults import VerifierCannotRunError
from regatta_executor.container.exec import commands as execs
from regatta_executor.container.exec import processes, tools
from regatta_executor.container.exec.harbor_commands import LOGS, TESTS, VERIFIER_LOGS
from regatta_executor.container.files import archive as files
from regatta_executor.container.files import snapshots
from regatta_executor.container.files.layer_usage import NOTHING_WRITTEN, Written
from regatta_executor.container.files.storage_cap import StorageCap
from regatta_executor.container.files.transfers import SNAPSHOT_MAX_BYTES
from regatta_executor.container.image.resolved import ResolvedImage

# The exit code of the exec that ends the agent's turn when the uploads it carried could not be written.
_INPUT_NOT_WRITTEN = 75
_RESTART_WAIT_SEC = 30

# What the exec that ended the turn printed, the agent's processes alive then, and their count.
Ended = tuple[str, list[processes.AliveProcess], int]


class UploadNotWrittenError(RuntimeError):
    """Files uploaded into the container could not be written there (an infrastructure fault)."""


class TurnContainer(Protocol):
    """What the turn uses of the environment that owns it (ContainerEnvironment): the engine and the
    container, the uploads staged and the folder read back (files/transfers.py), the storage cap."""

    logger: logging.Logger
    image: ResolvedImage | None
    _client: DockerClient
    _container_id: str | None
    _storage_cap: StorageCap | None
    _staged: files.StagedArchive | None
    _snapshot: snapshots.Snapshot | None
    _download_budget: int
    _enable_environment_dir_upload: bool

    def _running(self) -> str: ...

    async def _flush(self) -> None: ...

    def _drop_snapshot(self) -> None: ...

    def _restart_allowlist(self) -> None: ...

    def _empty_dirs_command(self, dirs: Sequence[str | PurePosixPath], *, chmod: bool = True) -> str: ...


async def restart(env: TurnContainer, integrity: IntegrityLog) -> None:
    """`enforce`: every process of the agent ended for certain. The engine kills the container's pid 1,
    and with it, by the kernel, every process of its pid namespace (no name, session or fork rate
    escapes that); then starts it again, its image's ENTRYPOINT with it. /logs and /logs/verifier are
    tmpfs volumes, emptied when the container stops: /logs is carried across (what the agent and Harbor
    put there is the verifier's to read, as in a shared container)."""
    if env._storage_cap is not None:
        await env._storage_cap.stop()
    api, container = env._client.api, env._running()
    logs = await execs.in_thread(files.read_folder, api, container, LOGS, env._download_budget)
    if logs is None:
        integrity.note("the agent's /logs were larger than the download budget: not carried across")
    try:
        await execs.in_thread(api.kill, container)
        await execs.in_thread(api.wait, container, timeout=_RESTART_WAIT_SEC)
        await execs.in_thread(api.start, container)
        if logs is not None:
            await execs.in_thread(api.put_archive, container, "/", logs)
    finally:
        if logs is not None:
            logs.close()
    await execs.in_thread(env._restart_allowlist)
    integrity.note("the container was restarted before the verifier (no agent process survived)")


def folders_command(env: TurnContainer, digest: str | None) -> str:
    """Empty /tests and /logs/verifier (writable by any user), then print the digest if any."""
    command = (
        env._empty_dirs_command([str(TESTS), str(VERIFIER_LOGS)], chmod=False)
        + f" && chmod 777 {VERIFIER_LOGS}"
    )
    return f"{command} && {digest}" if digest is not None else command


async def end_reading_logs(
    env: TurnContainer, then: str, alive_before: float | None, *, line: bool
) -> Ended | None:
    """The exec that ends the turn with `then` and archives /logs on its output, the archive kept to
    answer Harbor's reads; what it printed first when `line` (the digest). None when it failed: nothing
    is decided here then, the logs are read the engine's way and the verifier's start ends the turn
    again (and reports what fails)."""
    stream = snapshots.SnapshotStream(LOGS, min(env._download_budget, SNAPSHOT_MAX_BYTES), line=line)
    then = f"{then} && {snapshots.archive_command(tools.BUSYBOX, LOGS)}"
    try:
        _, alive, count = await processes.end_agent_turn(
            env._client.api, env._running(), then=then, list_alive_before=alive_before, on_stdout=stream
        )
    except (RuntimeError, DockerException) as exc:
        stream.discard()
        env.logger.debug("the agent's turn could not be ended with its logs read: %s", exc)
        return None
    snapshot = await execs.in_thread(stream.snapshot)
    if snapshot is not None:
        env._download_budget -= stream.size
        env._snapshot = snapshot
    return stream.line, alive, count


async def end_writing_uploads(
    env: TurnContainer, then: str, alive_before: float | None
) -> tuple[Ended, Written]:
    """The exec that ends the turn with `then` and writes the uploads staged since the verifier started,
    from its input, after emptying the folders they go to: one exec where an upload and an exec would be
    two. Returns what it printed and what of the verifier's files it wrote."""
    staged, data, written = env._staged, None, NOTHING_WRITTEN
    if staged is not None and staged and execs.sends_input(env._client.api):
        env._staged, data, written = None, staged.take(), staged.written
        # As root, over what is there, owned by root (as the engine's upload makes them); a failure
        # exits with a code of its own, to be told from the kill's.
        then += f" && {{ {tools.BUSYBOX} tar -xo -C / -f - || exit {_INPUT_NOT_WRITTEN}; }}"
    try:
        ended = await processes.end_agent_turn(
            env._client.api, env._running(), then=then, list_alive_before=alive_before, stdin=data
        )
    except execs.PlatformCommandError as exc:
        if data is not None and exc.code == _INPUT_NOT_WRITTEN:
            # The platform's upload failed, as when the engine refuses one: not the agent's fault.
            raise UploadNotWrittenError(
                f"the files uploaded for the verifier could not be written into the container: {exc}"
            ) from exc
        # The command ran in the sandbox and failed there (say, the agent made /tests a file it cannot
        # remove): the sandbox's state, so the agent's failure.
        raise VerifierCannotRunError(str(exc)) from exc
    finally:
        if data is not None:
            data.close()
    return ended, written
