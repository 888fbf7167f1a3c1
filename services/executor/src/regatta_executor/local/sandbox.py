"""One long-lived bubblewrap sandbox per trial; its pid 1 starts commands on request, like `docker exec`.

A sandbox's workspace folder on the host holds `root/` (the sandbox's `/`, a size-limited tmpfs when a
storage cap is set), `tests/` (the sandbox's /tests: a tmpfs of its own, so that an agent that filled
its root cannot keep the verifier's tests out), `logs/` and `verifier-logs/` (the trial's log folders
while the sandbox runs, on capped tmpfs mounts of their own; see logs.py), `io/` (output
files of running commands), `sandbox.log` (bubblewrap's own messages) and `.lock` (see janitor.py).

Everything inside runs as an unprivileged host uid of its own (`SandboxSpec.uid`), root only inside
the sandbox's user namespace (see command.py); what the executor puts inside belongs to it.

Commands are not entered from outside with nsenter: pid 1 (init.py, run by the host's python3)
already sits in the sandbox's namespaces, cgroups and capability set and forks them itself, so a command
costs one fork and one exec instead of a chain of five processes (measured: docs/performance.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from dataclasses import replace
from pathlib import Path, PurePosixPath

from regatta_executor.local import command as sandbox_command
from regatta_executor.local import janitor as sandbox_janitor
from regatta_executor.local import subprocesses
from regatta_executor.local.command import HOST_PATH
from regatta_executor.local.control import SandboxControl, StartFailed
from regatta_executor.local.files import SandboxFiles
from regatta_executor.local.limits import CgroupLeaf
from regatta_executor.local.network import SlirpNetwork
from regatta_executor.local.setup import SandboxSetup, check_reachable
from regatta_executor.local.spec import TESTS, VERIFIER_LOGS, CommandResult, SandboxSpec
from regatta_executor.local.subprocesses import OutputCallback

_BASE_ENV = {"PATH": HOST_PATH, "HOME": "/root", "LANG": "C.UTF-8", "USER": "root"}
# Processes kept free for a new command: pid 1's fork and what bash starts first.
_PROCESS_RESERVE = 4
_KILL_GRACE_SEC = 5.0

logger = logging.getLogger(__name__)


class Sandbox(SandboxSetup):
    def __init__(self, spec: SandboxSpec, log: logging.Logger | None = None) -> None:
        # Resolved: mount points and bubblewrap's view of its sources are real paths.
        self.spec = spec = replace(spec, workspace=spec.workspace.resolve())
        self._log = log or logger
        self._tools: dict[str, str] = {}
        self._cgroup: CgroupLeaf | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._control: SandboxControl | None = None
        self._pid1: int | None = None
        self._fds: dict[str, int] = {}
        self._commands = 0
        self._extra_limits: set[str] = set()
        self._network: SlirpNetwork | None = None
        self._staged: list[tuple[Path, Path]] = []
        foreign = [PurePosixPath(p) for p in (*spec.host_dirs, "/proc", "/dev")]
        foreign += [b.target for b in spec.binds if b.read_only]
        writable = {b.target: self._host_folder(b) for b in spec.binds if not b.read_only}
        if spec.storage_bytes is not None:
            writable[TESTS] = self._tests_dir
        self.files = SandboxFiles(self.root, writable, foreign, owner=spec.uid)

    async def start(self) -> None:
        if os.geteuid() != 0:
            raise RuntimeError("the local environment needs root to run bubblewrap")
        self._tools = sandbox_command.host_tools(self.spec.host_dirs)
        if self.spec.uid < 1000:
            raise ValueError(f"sandbox uid {self.spec.uid} is root or a system account's")
        check_reachable(self.spec.workspace.parent)
        if not sandbox_janitor.swept(self.spec.workspace.parent):
            await asyncio.to_thread(sandbox_janitor.sweep_once, self.spec.workspace.parent)
        self._fds["lock"] = sandbox_janitor.lock_workspace(self.spec.workspace)
        try:
            # A millisecond of mkdir/mount/cgroup writes: cheaper inline than a hop to a thread.
            self._prepare()
            await self._spawn()
            await self._forbid_user_namespaces()
            if self.spec.network:
                assert self._pid1 is not None
                self._network = SlirpNetwork()
                await self._network.attach(self._pid1, self.spec.start_timeout_sec)
        except BaseException as exc:
            log_path = self.spec.workspace / "sandbox.log"
            log_text = log_path.read_text(errors="replace").strip() if log_path.exists() else ""
            await self.stop(delete=True)
            if not isinstance(exc, Exception):
                raise
            raise RuntimeError(f"bubblewrap sandbox failed to start: {log_text or repr(exc)}") from exc

    async def exec(
        self,
        command: str,
        *,
        cwd: str,
        env: dict[str, str] | None = None,
        timeout_sec: float | None = None,
        on_output: OutputCallback | None = None,
    ) -> CommandResult:
        control = self._control
        if control is None or self._pid1 is None:
            raise RuntimeError("the sandbox is not running")
        if self._cgroup is not None and self._cgroup.saturated(_PROCESS_RESERVE):
            await asyncio.to_thread(self._relieve_process_limit)
        self._commands += 1
        command_id = str(self._commands)
        out_path = self.spec.workspace / "io" / f"{command_id}.out"
        err_path = None if on_output else out_path.with_suffix(".err")
        # Output goes to files, not pipes: a background process keeping a pipe open would otherwise
        # hold the command until it exits, unlike `docker exec`.
        full_env = {**_BASE_ENV, **(env or {})}
        streamer: asyncio.Task[None] | None = None
        done: asyncio.Future[int] | None = None
        try:
            for attempt in range(2):
                await self._start_command(control, command_id, cwd, command, full_env, out_path, err_path)
                done = control.result(command_id)
                if on_output is not None and streamer is None:
                    streamer = asyncio.create_task(subprocesses.stream_lines(out_path, done.done, on_output))
                try:
                    code = await self._wait(control, command_id, done, timeout_sec)
                    break
                except StartFailed as exc:
                    if attempt or self._cgroup is None:
                        raise RuntimeError(f"cannot start a command in the sandbox: {exc}") from None
                    await asyncio.to_thread(self._relieve_process_limit)
        finally:
            control.forget(command_id)
            if streamer is not None:
                finished = done is not None and done.done() and not done.cancelled()
                if not finished or done.exception() is not None:
                    streamer.cancel()
                await asyncio.gather(streamer, return_exceptions=True)
            stdout = subprocesses.take_output(out_path)
            stderr = subprocesses.take_output(err_path) if err_path else None
        return CommandResult(return_code=code, stdout=stdout, stderr=stderr)

    async def reset_for_verifier(self, *, kill: bool) -> None:
        """Make the sandbox ready for a verifier: empty the verifier's log folder and, with `kill`,
        first kill every process but pid 1 (whatever the agent left running could otherwise rig the
        verifier's output or read its secrets from /proc/<pid>/environ); then no process that ran
        before survives, so none holds a file or folder of the new verifier output open."""
        control = self._control
        if control is None:
            raise RuntimeError("the sandbox is not running")
        if kill:
            self._commands += 1
            await control.kill_all(f"killall-{self._commands}")
        if any(b.target == VERIFIER_LOGS for b in self.spec.binds):
            await asyncio.to_thread(self.files.clear_dir, str(VERIFIER_LOGS))

    async def stop(self, *, delete: bool) -> None:
        """Kill every process of the sandbox, copy its log folders back to the host, then delete its
        workspace or mark it kept. Idempotent."""
        self._pid1 = None
        if "pid1" in self._fds:
            # SIGKILL to the namespace's pid 1 makes the kernel kill everything else inside.
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._fds["pid1"], signal.SIGKILL)
        if self._control is not None:
            self._control.close("the sandbox was stopped")
        if self._process is not None:
            subprocesses.kill(self._process)
            await self._process.wait()
        if self._network is not None:
            await self._network.close()
            self._network = None
        if self._staged:
            await asyncio.to_thread(self._unstage_log_folders)
        cgroup, self._cgroup = self._cgroup, None
        if cgroup is not None or delete:
            # One hop to a thread for both: a busy cgroup is retried with sleeps, and a root without
            # its tmpfs can be a large tree to delete.
            await asyncio.to_thread(self._clean_up, cgroup, delete)
        elif self.spec.workspace.is_dir():
            (self.spec.workspace / sandbox_janitor.KEPT_MARKER).touch()
        for name in list(self._fds):
            os.close(self._fds.pop(name))

    def _clean_up(self, cgroup: CgroupLeaf | None, delete: bool) -> None:
        if cgroup is not None:
            cgroup.remove()
        if delete:
            sandbox_janitor.remove_workspace(self.spec.workspace)
        elif self.spec.workspace.is_dir():
            (self.spec.workspace / sandbox_janitor.KEPT_MARKER).touch()

    async def _start_command(
        self,
        control: SandboxControl,
        command_id: str,
        cwd: str,
        command: str,
        env: dict[str, str],
        out_path: Path,
        err_path: Path | None,
    ) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        out_fd = os.open(out_path, flags, 0o600)
        err_fd = os.open(err_path, flags, 0o600) if err_path else out_fd
        try:
            await control.run(command_id, cwd, command, env, [out_fd, err_fd])
        finally:
            os.close(out_fd)
            if err_fd != out_fd:
                os.close(err_fd)

    async def _wait(
        self, control: SandboxControl, command_id: str, done: asyncio.Future[int], timeout_sec: float | None
    ) -> int:
        try:
            return await asyncio.wait_for(asyncio.shield(done), timeout_sec or None)
        except TimeoutError:
            control.kill(command_id)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(done), _KILL_GRACE_SEC)
            raise RuntimeError(f"Command timed out after {timeout_sec} seconds") from None
        except asyncio.CancelledError:
            control.kill(command_id)
            raise

    def _relieve_process_limit(self) -> None:
        """A sandbox at its process limit cannot start any command (a fork bomb left behind by an
        agent, typically). Kill everything in it but pid 1 so that later commands, such as the
        verifier's, can run."""
        assert self._cgroup is not None and self._pid1 is not None
        self._log.warning("the sandbox hit its process limit; killing all its processes")
        self._cgroup.kill(spare=frozenset({self._pid1}))
