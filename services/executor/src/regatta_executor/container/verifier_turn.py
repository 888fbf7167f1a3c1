"""The end of the agent's turn and the start of a shared verifier, in the container environment: each
`ContainerEnvironment` owns a `VerifierTurn`, which holds the turn's state, and calls it from Harbor's
methods (a command, an upload, a read of the agent's logs, the agent's scope).

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

The execs that end the turn are turn_end.py's.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from harbor.environments.base import ExecResult
from regatta_shared.events.integrity import AgentProcess

from regatta_executor.attempt.integrity_record import IntegrityLog
from regatta_executor.container import turn_end
from regatta_executor.container.exec import commands as execs
from regatta_executor.container.exec import processes
from regatta_executor.container.exec.harbor_commands import (
    AGENT_LOGS,
    ROOT_USERS,
    TESTS,
    removes_reward_files,
    runs_test_script,
)
from regatta_executor.container.exec.platform import PLATFORM_SHELL
from regatta_executor.container.files.layer_usage import NOTHING_WRITTEN, Written
from regatta_executor.container.integrity import file_listing
from regatta_executor.container.integrity.toolchain_check import check_tool_chain
from regatta_executor.container.integrity.verifier_files import hash_upload
from regatta_executor.container.test_script import TestScriptRun


class VerifierTurn:
    """Whose turn it is in one attempt's container: the agent's, until a shared verifier starts, then
    the verifier's (and the agent's again in a later step of a multi-step task)."""

    def __init__(
        self,
        container: turn_end.TurnContainer,
        integrity: IntegrityLog,
        *,
        owners_dir: Path,
        enforced: bool,
        for_verifier: bool,
        shared_verifier: bool,
    ) -> None:
        self._env = container
        self._integrity = integrity
        # Who owns the image's files (integrity/toolchain_check.py), under the executor's state folder.
        self._owners_dir = owners_dir
        self._enforced = enforced
        # This environment is a separate verifier's (Harbor's `separate` mode): no agent ran in it.
        self.for_verifier = for_verifier
        # A verifier of the task runs in this container (shared mode, in at least one step).
        self.shared_verifier = shared_verifier
        # True from the moment the agent's processes were ended and /tests and /logs/verifier emptied
        # until the next command: the tests uploaded meanwhile are the verifier's.
        self._verifier_ready = False
        # What the exec that ended the agent's turn printed (the digest's line), from the moment Harbor
        # read the agent's logs back (that exec archived them) until the next command: the verifier
        # then starts without an exec of its own (prepare_verifier).
        self._turn_ended: str | None = None
        # Harbor started the verifier (prepare_verifier) and the exec that ends the agent's turn has not
        # run yet: it runs before anything else touches the container (before_operation).
        self._verifier_pending = False
        # Harbor runs the agent's setup and turns inside scoped_exec_env: while it is entered, any read
        # of the agent's logs is the agent's own, mid-turn.
        self._agent_scopes = 0
        # From the verifier's start on, under `enforce`, commands start from the platform's shell
        # (platform.py) where the container has it (known at its create); under `record`, from the
        # image's bash, as Harbor's.
        self._verifier_phase = False
        self.platform_shell = False
        # Expected content of /tests (container path -> SHA-256) from the platform's uploads since the
        # verifier's folders were last emptied; None before any.
        self._tests_uploaded: dict[str, str] | None = None
        # The host's boot time before the container's first exec: what started earlier in it is the
        # image's, never the agent's (processes.LIST_OTHERS leaves it out).
        self._first_exec_at: float | None = None
        self._created_at = time.time()
        # While the exec that ends the agent's turn for the verifier runs (a restart under `enforce`
        # empties /logs meanwhile), the live view reads nothing.
        self._turn_ending = False

    def note_own_container(self) -> None:
        """Harbor's `separate` mode: a fresh container of the task's image (or its verifier's), into
        which Harbor copies only the agent's collected outputs. Its writes are the verifier's."""
        self._integrity.note(
            "the verifier ran in a container of its own; only the outputs Harbor collected came "
            "from the agent's"
        )

    def live_folder(self) -> str | None:
        """The log folder the live view may read now: the agent's while its turn runs, the verifier's
        once the turn's end emptied it; none in a separate verifier's container."""
        if self.for_verifier or self._turn_ending or self._verifier_pending:
            return None
        if self._verifier_phase:
            return "verifier"
        return "agent" if self._agent_scopes else None

    async def before_download(self, path: str) -> None:
        if self._turn_is_over(path):
            await self._end_agent_turn()

    async def expect_tests(self, source: Path, target: str, *, single: bool) -> None:
        """What the platform writes into /tests, hashed from the host's copy (off the event loop: a
        task's tests may hold large data), for the check of what else wrote there (verifier_files.py)."""
        if self._tests_uploaded is not None and PurePosixPath(target).is_relative_to(TESTS):
            self._tests_uploaded.update(await execs.in_thread(hash_upload, source, target, single=single))

    async def before_upload_dir(self, source: Path, target: str) -> None:
        if PurePosixPath(target) == TESTS and not self._verifier_ready and not self.for_verifier:
            # The verifier starts now (Harbor did not announce it by removing reward files first).
            # Harbor uploads a multi-step task's tests in several calls without an exec between them;
            # only the first of those clears.
            await self.prepare_verifier()
        await self.expect_tests(source, target, single=False)

    async def starts_verifier(self, command: str) -> bool:
        """A command as root: Harbor removes stale reward files as the verifier starts. Emptying
        /logs/verifier does that too, so the agent's processes are ended and the verifier's folders
        emptied now, in the same exec, rather than by an exec of its own when the tests are uploaded;
        True when nothing else is left to run. Not where tests come with the image (Harbor then
        uploads none, and /tests must stay)."""
        if not (removes_reward_files(command) and self.shared_verifier):
            return False
        if self._env._enable_environment_dir_upload:
            await self.prepare_verifier()
            return True
        await self._check_sandbox()
        return False

    def command(self, command: str, user: str) -> tuple[list[str], TestScriptRun | None]:
        """The argv of a command in the container, and the test script's run when it is Harbor's run of
        the tests in a shared verifier (which reads /logs/verifier back next: the same exec archives it)."""
        shell = PLATFORM_SHELL if self._enforced and self._verifier_phase and self.platform_shell else "bash"
        wrapped = self._verifier_phase and self.platform_shell and not self.for_verifier
        if wrapped and user in ROOT_USERS and runs_test_script(command):
            test_run = TestScriptRun.wrapping(command, shell, self._env._download_budget)
            return test_run.argv, test_run
        return [shell, "-c", command], None

    async def tests_ran(self, test_run: TestScriptRun, output: execs.Output) -> ExecResult:
        stderr = test_run.written(output.stderr, self._tests_uploaded, self._integrity)
        stdout = output.stdout + test_run.logs.rest().decode("utf-8", "replace")
        snapshot = await execs.in_thread(test_run.logs.snapshot)
        if snapshot is not None:
            # Nothing ran since the test ended: the archive answers Harbor's read, as the engine's would.
            self._env._download_budget -= test_run.logs.size
            self._env._snapshot = snapshot
        return ExecResult(stdout=stdout, stderr=stderr, return_code=output.return_code)

    def _turn_is_over(self, path: str) -> bool:
        """Harbor reads the agent's log folder back, outside any agent code, only once the agent's turn
        is over (and the verifier or the container's removal comes next): the moment to end it."""
        env = self._env
        return (
            path == AGENT_LOGS
            and self.shared_verifier
            and not self.for_verifier
            and self._agent_scopes == 0
            and self._turn_ended is None
            and not self._verifier_pending
            and not self._verifier_phase
            and env._enable_environment_dir_upload
            and env._container_id is not None
            and env.image is not None
            and env._snapshot is None
        )

    async def _end_agent_turn(self) -> None:
        """End the agent's turn (restarting the container under `enforce`), empty the verifier's
        folders and print the digest as `prepare_verifier` does, and archive /logs in the same exec
        (turn_end.end_reading_logs): Harbor's read of the agent's logs is then answered from that
        archive, and the verifier's start needs no exec of its own."""
        await self._env._flush()
        self.ran()
        if self._enforced:
            await self._restart()
        self.before_exec()
        digest = self._digest_command()
        then = turn_end.folders_command(self._env, digest)
        ended = await turn_end.end_reading_logs(
            self._env, then, self._alive_before(), line=digest is not None
        )
        if ended is None:
            return
        self._turn_ended, alive, count = ended
        self._record_alive(alive, count)
        self._tests_uploaded = {}

    async def _restart(self) -> None:
        await turn_end.restart(self._env, self._integrity)
        # What starts from now on before the next exec is the image's ENTRYPOINT's.
        self._first_exec_at = None

    def _alive_before(self) -> float | None:
        """Under `record`, the agent's processes alive at the turn's end are listed (the evidence)."""
        return None if self._enforced else (self._first_exec_at or 0.0)

    def _record_alive(self, alive: list[processes.AliveProcess], count: int) -> None:
        if self._enforced:
            return
        named = [AgentProcess(pid=p.pid, name=p.name or "?", command=p.command) for p in alive]
        self._integrity.processes(named, count)

    def _image_listing(self) -> file_listing.Listing | None:
        image = self._env.image
        return file_listing.known(image.image_id) if image is not None else None

    def _digest_command(self) -> str | None:
        """What prints the container's digest of the tool chain (None without the image's listing: the
        evidence then reads in full)."""
        listing = self._image_listing()
        return file_listing.digest_command(listing) if listing is not None else None

    async def prepare_verifier(self) -> None:
        """Harbor starts the verifier. Nothing the agent left in /tests or /logs/verifier may count.
        Unless the agent's turn was ended already (when Harbor read its logs), the exec that ends it
        runs with the next operation on the container, carrying what Harbor uploads meanwhile (the
        tests) as its input (before_operation): until then nothing runs in the container and nothing
        is read from it."""
        if self._turn_ended is None:
            self._verifier_pending = True
            self._verifier_ready = True
            self._tests_uploaded = {}
            return
        # Ended when Harbor read the agent's logs, and nothing ran since (an upload runs nothing).
        printed, self._turn_ended = self._turn_ended, None
        await self._env._flush()
        await self._sandbox_checked(printed)

    async def before_operation(self) -> None:
        """Before anything touches the container (the environment's flush of its uploads): the exec
        that ends the agent's turn, if the verifier's start left it pending."""
        if self._verifier_pending:
            self._verifier_pending = False
            self._turn_ending = True
            try:
                await self._end_turn_for_verifier()
            finally:
                self._turn_ending = False
            if self._agent_scopes:
                # The operation is the agent's (a later step began before the verifier ran anything).
                self._agent_turn_begins()

    async def _end_turn_for_verifier(self) -> None:
        """The exec that ends the agent's turn (after a restart under `enforce`) and writes the uploads
        staged since the verifier started (turn_end.end_writing_uploads)."""
        then = turn_end.folders_command(self._env, self._digest_command())
        cap = self._env._storage_cap
        if cap is not None:
            # The files written here are the verifier's: they must not count against the agent's
            # cap, or get the container killed by its watch (the check after the exec allows them).
            await cap.stop()
        self.ran()
        if self._enforced:
            await self._restart()
        self.before_exec()
        (printed, alive, count), written = await turn_end.end_writing_uploads(
            self._env, then, self._alive_before()
        )
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
        env = self._env
        if env._storage_cap is not None:
            await env._storage_cap.stop()
            await env._storage_cap.check(allowance=written)
        self._verifier_phase = True
        if image_unchanged:
            return
        assert env.image is not None, "started"
        await check_tool_chain(
            env._client.api,
            env._running(),
            env.image.image_id,
            owners_dir=self._owners_dir,
            created_at=self._created_at,
            enforced=self._enforced,
            integrity=self._integrity,
        )

    @contextlib.contextmanager
    def agent_scope(self) -> Iterator[None]:
        """Harbor's scoped_exec_env wraps the agent's setup and run in this alone: the agent's turn
        (again, in a later step of a multi-step task), so its commands run in the image's bash and its
        writes are measured until the next verifier. (A verifier start still pending is resolved
        first, by the turn's first operation: before_operation.)"""
        if self._verifier_phase:
            self._agent_turn_begins()
        self._agent_scopes += 1
        try:
            yield
        finally:
            self._agent_scopes -= 1

    def _agent_turn_begins(self) -> None:
        self._verifier_phase = False
        cap = self._env._storage_cap
        if cap is not None and not cap.exceeded:
            cap.start()

    def before_exec(self) -> None:
        if self._first_exec_at is None:
            self._first_exec_at = processes.boot_time()

    def ran(self) -> None:
        """Something runs in the container: what was read from it may change, and the verifier's
        folders may be written again."""
        self._env._drop_snapshot()
        self._verifier_ready = False
        self._turn_ended = None
