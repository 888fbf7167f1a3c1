"""The end of the agent's turn and the start of a shared verifier, in the container environment (the
base of `ContainerEnvironment`; the state it uses is the environment's, made in its `__init__`).

Inside a shared container no rule on paths or processes can tell honest change from cheating, so what
happens there depends on the run's verifier-integrity policy (docs/reliability.md):
- `record` (the default) keeps Harbor's semantics: the agent's processes keep running into verification
  and nothing it changed fails the attempt by itself. The platform records evidence
  (attempt/integrity_record.py): the agent's processes alive when the verifier starts, every change to the
  verifier's tool chain with what explains it (toolchain.py), and /tests or reward files written by
  another hand (verifier_files.py).
- `enforce`: the container is restarted before the verifier (the engine kills every process in it,
  whatever its name, session or fork rate; the image's ENTRYPOINT starts again, as in a fresh container;
  /logs, whose folders are tmpfs, is carried across), and an unexplained change to the tool chain fails
  the attempt, naming the files. Python byte-code caches explained only as such are removed (Python
  rebuilds them from their sources, which are judged).
In Harbor's `separate` mode the verifier gets a container of its own and none of this runs.

Every engine round trip costs tens of milliseconds of the engine's CPU, so the turn ends in one exec of
the platform's shell that also does the transfer at hand: where Harbor reads the agent's logs back after
the turn (outside scoped_exec_env), it archives /logs on its output; otherwise Harbor's removal of stale
reward files starts the verifier, and the exec runs with the next operation, writing the uploads made
meanwhile (the tests) from its input.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import override

from docker.errors import DockerException
from regatta_shared.events.integrity import AgentProcess

from regatta_executor.attempt.integrity_record import IntegrityLog
from regatta_executor.attempt.sandbox_faults import VerifierCannotRunError
from regatta_executor.container.exec import commands as execs
from regatta_executor.container.exec import processes, tools
from regatta_executor.container.exec.harbor_commands import AGENT_LOGS, LOGS, TESTS, VERIFIER_LOGS
from regatta_executor.container.files import archive as files
from regatta_executor.container.files import snapshots
from regatta_executor.container.files.layer_usage import NOTHING_WRITTEN, Written
from regatta_executor.container.files.storage_cap import StorageCap
from regatta_executor.container.files.transfers import SNAPSHOT_MAX_BYTES, ContainerTransfers
from regatta_executor.container.image.resolved import ResolvedImage
from regatta_executor.container.integrity import file_listing
from regatta_executor.container.integrity.toolchain_check import check_tool_chain
from regatta_executor.container.integrity.verifier_files import hash_upload
from regatta_executor.container.network import allowlist
from regatta_executor.container.options import ContainerEnvironmentOptions

# The exit code of the exec that ends the agent's turn when the uploads it carried could not be written.
_INPUT_NOT_WRITTEN = 75
_RESTART_WAIT_SEC = 30


class UploadNotWrittenError(RuntimeError):
    """Files uploaded into the container could not be written there (an infrastructure fault)."""


class VerifierTurn(ContainerTransfers):
    options: ContainerEnvironmentOptions
    image: ResolvedImage | None
    _storage_cap: StorageCap | None
    _allowlist: allowlist.AttemptState | None
    _integrity: IntegrityLog
    # Expected content of /tests (container path -> SHA-256) from the platform's uploads since the
    # verifier's folders were last emptied; None before any.
    _tests_uploaded: dict[str, str] | None
    _verifier_ready: bool
    _turn_ended: str | None
    _verifier_pending: bool
    _agent_scopes: int
    _verifier_phase: bool
    _first_exec_at: float | None
    _created_at: float
    # This environment is a separate verifier's (Harbor's `separate` mode): no agent ran in it.
    _for_verifier: bool
    # A verifier of the task runs in this container (shared mode, in at least one step).
    _shared_verifier: bool

    _owners_dir: Path

    def _restart_allowlist(self) -> None:
        """After a restart: the allowlist follows the container's address (ContainerEnvironment's)."""

    @property
    def _enforced(self) -> bool:
        return self.options.verifier_integrity == "enforce"

    @override
    async def download_dir(self, source_dir: Path | str, target_dir: Path | str) -> None:
        if self._turn_is_over(files.container_path(str(source_dir))):
            await self._end_agent_turn()
        await super().download_dir(str(source_dir), target_dir)

    @override
    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        await self._expect_tests(Path(source_path), files.container_path(target_path), single=True)
        await super().upload_file(source_path, target_path)

    async def _expect_tests(self, source: Path, target: str, *, single: bool) -> None:
        """What the platform writes into /tests, hashed from the host's copy (off the event loop: a
        task's tests may hold large data), for the check of what else wrote there (verifier_files.py)."""
        if self._tests_uploaded is not None and PurePosixPath(target).is_relative_to(TESTS):
            self._tests_uploaded.update(await execs.in_thread(hash_upload, source, target, single=single))

    def _turn_is_over(self, path: str) -> bool:
        """Harbor reads the agent's log folder back, outside any agent code, only once the agent's turn
        is over (and the verifier or the container's removal comes next): the moment to end it."""
        return (
            path == AGENT_LOGS
            and self._shared_verifier
            and not self._for_verifier
            and self._agent_scopes == 0
            and self._turn_ended is None
            and not self._verifier_pending
            and not self._verifier_phase
            and self._enable_environment_dir_upload
            and self._container_id is not None
            and self.image is not None
            and self._snapshot is None
        )

    async def _end_agent_turn(self) -> None:
        """End the agent's turn (restarting the container under `enforce`), empty the verifier's
        folders and print the digest as `_prepare_verifier` does, and archive /logs in the same exec:
        Harbor's read of the agent's logs is then answered from that archive, and the verifier's start
        needs no exec of its own. If that exec fails, nothing is decided here: the logs are read the
        engine's way, and the verifier's start ends the turn again (and reports what fails)."""
        await self._flush()
        self._ran()
        if self._enforced:
            await self._restart()
        self._before_exec()
        digest = self._digest_command()
        stream = snapshots.SnapshotStream(
            LOGS, min(self._download_budget, SNAPSHOT_MAX_BYTES), line=digest is not None
        )
        then = f"{self._verifier_folders_command(digest)} && {snapshots.archive_command(tools.BUSYBOX, LOGS)}"
        try:
            _, alive, count = await processes.end_agent_turn(
                self._client.api,
                self._running(),
                then=then,
                list_alive_before=None if self._enforced else (self._first_exec_at or 0.0),
                on_stdout=stream,
            )
        except (RuntimeError, DockerException) as exc:
            stream.discard()
            self.logger.debug("the agent's turn could not be ended with its logs read: %s", exc)
            return
        self._record_alive(alive, count)
        self._tests_uploaded = {}
        snapshot = await execs.in_thread(stream.snapshot)
        self._turn_ended = stream.line
        if snapshot is not None:
            self._download_budget -= stream.size
            self._snapshot = snapshot

    async def _restart(self) -> None:
        """`enforce`: every process of the agent ended for certain. The engine kills the container's
        pid 1, and with it, by the kernel, every process of its pid namespace (no name, session or fork
        rate escapes that); then starts it again, its image's ENTRYPOINT with it. /logs and
        /logs/verifier are tmpfs volumes, emptied when the container stops: /logs is carried across
        (what the agent and Harbor put there is the verifier's to read, as in a shared container)."""
        if self._storage_cap is not None:
            await self._storage_cap.stop()
        api, container = self._client.api, self._running()
        logs = await execs.in_thread(files.read_folder, api, container, LOGS, self._download_budget)
        if logs is None:
            self._integrity.note("the agent's /logs were larger than the download budget: not carried across")
        try:
            await execs.in_thread(api.kill, container)
            await execs.in_thread(api.wait, container, timeout=_RESTART_WAIT_SEC)
            await execs.in_thread(api.start, container)
            if logs is not None:
                await execs.in_thread(api.put_archive, container, "/", logs)
        finally:
            if logs is not None:
                logs.close()
        await execs.in_thread(self._restart_allowlist)
        # What starts from now on before the next exec is the image's ENTRYPOINT's.
        self._first_exec_at = None
        self._integrity.note("the container was restarted before the verifier (no agent process survived)")

    def _record_alive(self, alive: list[processes.AliveProcess], count: int) -> None:
        if self._enforced:
            return
        named = [AgentProcess(pid=p.pid, name=p.name or "?", command=p.command) for p in alive]
        self._integrity.processes(named, count)

    def _image_listing(self) -> file_listing.Listing | None:
        return file_listing.known(self.image.image_id) if self.image is not None else None

    def _digest_command(self) -> str | None:
        """What prints the container's digest of the tool chain (None without the image's listing: the
        evidence then reads in full)."""
        listing = self._image_listing()
        return file_listing.digest_command(listing) if listing is not None else None

    def _verifier_folders_command(self, digest: str | None) -> str:
        """Empty /tests and /logs/verifier (writable by any user), then print the digest if any."""
        command = (
            self._empty_dirs_command([str(TESTS), str(VERIFIER_LOGS)], chmod=False)
            + f" && chmod 777 {VERIFIER_LOGS}"
        )
        return f"{command} && {digest}" if digest is not None else command

    @override
    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        target = files.container_path(target_dir)
        if await self.unchanged_since_download(Path(source_dir), target):
            # What Harbor read back, sent back unchanged: the container holds it already, as the agent
            # left it, which is what a verifier sees where the logs are mounted (Harbor's docker).
            return
        self._forget_downloads(target)
        if PurePosixPath(target) == TESTS and not self._verifier_ready and not self._for_verifier:
            # The verifier starts now (Harbor did not announce it by removing reward files first).
            # Harbor uploads a multi-step task's tests in several calls without an exec between them;
            # only the first of those clears.
            await self._prepare_verifier()
        await self._expect_tests(Path(source_dir), target, single=False)
        if not any(Path(source_dir).iterdir()):
            # Nothing to archive, but the folder must exist afterwards (`mkdir -p`: an archive entry
            # for it would reset an existing folder's owner and mode).
            await self.exec(self._ensure_dirs_command([target], chmod=False), user="root")
            return
        await execs.in_thread(self._stage().add_dir, Path(source_dir), target)

    async def _prepare_verifier(self) -> None:
        """Harbor starts the verifier. Nothing the agent left in /tests or /logs/verifier may count.
        Unless the agent's turn was ended already (when Harbor read its logs), the exec that ends it
        runs with the next operation on the container, carrying what Harbor uploads meanwhile (the
        tests) as its input (_flush): until then nothing runs in the container and nothing is read
        from it."""
        if self._turn_ended is None:
            self._verifier_pending = True
            self._verifier_ready = True
            self._tests_uploaded = {}
            return
        # Ended when Harbor read the agent's logs, and nothing ran since (an upload runs nothing).
        printed, self._turn_ended = self._turn_ended, None
        await self._flush()
        await self._sandbox_checked(printed)

    @override
    async def _flush(self) -> None:
        if self._verifier_pending:
            self._verifier_pending = False
            await self._end_turn_for_verifier()
            if self._agent_scopes:
                # The operation is the agent's (a later step began before the verifier ran anything).
                self._agent_turn_begins()
        await super()._flush()

    async def _end_turn_for_verifier(self) -> None:
        """The exec that ends the agent's turn (`_verifier_folders_command` with the digest, after a
        restart under `enforce`), then writes the uploads staged since the verifier started, from its
        input, after emptying the folders they go to: one exec where an upload and an exec would be
        two."""
        then = self._verifier_folders_command(self._digest_command())
        if self._storage_cap is not None:
            # The files written here are the verifier's: they must not count against the agent's
            # cap, or get the container killed by its watch (the check after the exec allows them).
            await self._storage_cap.stop()
        self._ran()
        if self._enforced:
            await self._restart()
        staged, data, written = self._staged, None, NOTHING_WRITTEN
        if staged is not None and staged and execs.sends_input(self._client.api):
            self._staged, data, written = None, staged.take(), staged.written
            # As root, over what is there, owned by root (as the engine's upload makes them); a failure
            # exits with a code of its own, to be told from the kill's.
            then += f" && {{ {tools.BUSYBOX} tar -xo -C / -f - || exit {_INPUT_NOT_WRITTEN}; }}"
        self._before_exec()
        try:
            printed, alive, count = await processes.end_agent_turn(
                self._client.api,
                self._running(),
                then=then,
                list_alive_before=None if self._enforced else (self._first_exec_at or 0.0),
                stdin=data,
            )
        except execs.PlatformCommandError as exc:
            if data is not None and exc.code == _INPUT_NOT_WRITTEN:
                # The platform's upload failed, as when the engine refuses one: not the agent's fault.
                raise UploadNotWrittenError(
                    f"the files uploaded for the verifier could not be written into the container: {exc}"
                ) from exc
            # The command ran in the sandbox and failed there (say, the agent made /tests a file it
            # cannot remove): the sandbox's state, so the agent's failure.
            raise VerifierCannotRunError(str(exc)) from exc
        finally:
            if data is not None:
                data.close()
        self._record_alive(alive, count)
        await self._sandbox_checked(printed, written)

    async def _sandbox_checked(self, printed: str, written: Written = NOTHING_WRITTEN) -> None:
        """The checks of the agent's turn, given what the exec that ended it printed (the digest that
        shows nothing covered changed spares the evidence its full listing: file_listing.py) and the
        what of the verifier's files it wrote."""
        listing = self._image_listing()
        await self._check_sandbox(
            image_unchanged=listing is not None and file_listing.unchanged(listing, printed),
            written=written,
        )
        self._verifier_ready = True

    async def _check_sandbox(self, image_unchanged: bool = False, written: Written = NOTHING_WRITTEN) -> None:
        """The agent's turn is over: the writable layer within its cap (else the agent's failure), and
        the tool chain's evidence recorded (integrity/toolchain_check.py); under `enforce` an unexplained
        change fails the attempt."""
        if self._storage_cap is not None:
            await self._storage_cap.stop()
            await self._storage_cap.check(allowance=written)
        self._verifier_phase = True
        if image_unchanged:
            return
        assert self.image is not None, "started"
        await check_tool_chain(
            self._client.api,
            self._running(),
            self.image.image_id,
            owners_dir=self._owners_dir,
            created_at=self._created_at,
            enforced=self._enforced,
            integrity=self._integrity,
        )

    @override
    @contextlib.contextmanager
    def scoped_exec_env(self, env: dict[str, str]) -> Iterator[None]:
        # Harbor wraps the agent's setup and run in this alone: the agent's turn (again, in a later
        # step of a multi-step task), so its commands run in the image's bash and its writes are
        # measured until the next verifier. (A verifier start still pending is resolved first, by the
        # turn's first operation: _flush.)
        if self._verifier_phase:
            self._agent_turn_begins()
        self._agent_scopes += 1
        try:
            with super().scoped_exec_env(env):
                yield
        finally:
            self._agent_scopes -= 1

    def _agent_turn_begins(self) -> None:
        self._verifier_phase = False
        if self._storage_cap is not None and not self._storage_cap.exceeded:
            self._storage_cap.start()

    @contextlib.contextmanager
    def _cap_is_the_reason(self) -> Iterator[None]:
        """An engine error from a container the storage cap killed meanwhile (the exec's create or start
        answering 409 "not running") is the cap's failure, not an infrastructure fault."""
        try:
            yield
        except DockerException as exc:
            if self._storage_cap is not None and self._storage_cap.exceeded:
                raise self._storage_cap.error() from exc
            raise

    @override
    def _running(self) -> str:
        # A container the storage cap killed fails whatever touches it next with the cap's reason.
        if self._storage_cap is not None:
            self._storage_cap.raise_if_exceeded()
        return super()._running()

    def _before_exec(self) -> None:
        if self._first_exec_at is None:
            self._first_exec_at = processes.boot_time()

    def _ran(self) -> None:
        """Something runs in the container: what was read from it may change, and the verifier's
        folders may be written again."""
        self._drop_snapshot()
        self._verifier_ready = False
        self._turn_ended = None
