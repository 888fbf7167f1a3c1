"""One long-lived bubblewrap sandbox per trial; its pid 1 starts commands on request, like `docker exec`.

A sandbox's workspace folder on the host holds `root/` (the sandbox's `/`, a size-limited tmpfs when a
storage cap is set), `tests/` (the sandbox's /tests: a tmpfs of its own, so that an agent that filled
its root cannot keep the verifier's tests out), `logs/` and `verifier-logs/` (the trial's log folders
while the sandbox runs, on capped tmpfs mounts of their own; see sandbox_logs.py), `io/` (output
files of running commands), `sandbox.log` (bubblewrap's own messages) and `.lock` (see sandbox_janitor).

Everything inside runs as an unprivileged host uid of its own (`SandboxSpec.uid`), root only inside
the sandbox's user namespace (see sandbox_command.py); what the executor puts inside belongs to it.

Commands are not entered from outside with nsenter: pid 1 (sandbox_init.py, run by the host's python3)
already sits in the sandbox's namespaces, cgroups and capability set and forks them itself, so a command
costs one fork and one exec instead of a chain of five processes (measured: docs/performance.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from regatta_executor import (
    sandbox_command,
    sandbox_janitor,
    sandbox_logs,
    storage,
    subprocesses,
)
from regatta_executor.limits import CgroupLeaf, Limits
from regatta_executor.sandbox_command import HOST_PATH
from regatta_executor.sandbox_control import SandboxControl, StartFailed
from regatta_executor.sandbox_files import SandboxFiles
from regatta_executor.sandbox_network import RESOLV_CONF, SlirpNetwork
from regatta_executor.subprocesses import OutputCallback

# Not /var: its lib/, log/, cache/ and spool/ hold other services' data; the sandbox gets empty ones.
DEFAULT_HOST_DIRS = ("/usr", "/etc", "/opt")
TESTS = PurePosixPath("/tests")
VERIFIER_LOGS = PurePosixPath("/logs/verifier")
# Host uids for sandboxes: unused by any account, one picked at random per sandbox so that no two
# sandboxes (nor any host service) share one in practice.
SANDBOX_UIDS = range(2_000_000_000, 2_001_000_000)
_SKELETON = (
    "root", "tests", "solution", "logs/agent", "logs/verifier", "logs/artifacts", "run",
    "var/lib", "var/cache", "var/log", "var/spool",
)  # fmt: skip
_STICKY = ("tmp", "var/tmp")
_BASE_ENV = {"PATH": HOST_PATH, "HOME": "/root", "LANG": "C.UTF-8", "USER": "root"}
# Processes kept free for a new command: pid 1's fork and what bash starts first.
_PROCESS_RESERVE = 4
_KILL_GRACE_SEC = 5.0

logger = logging.getLogger(__name__)


def pick_uid() -> int:
    return SANDBOX_UIDS.start + secrets.randbelow(len(SANDBOX_UIDS))


@dataclass(frozen=True)
class Bind:
    source: Path
    target: PurePosixPath
    read_only: bool = False
    log_folder: bool = False
    """A trial log folder: staged in the workspace (capped) while the sandbox runs, copied back to
    `source` when it stops."""


@dataclass(frozen=True)
class SandboxSpec:
    workspace: Path
    workdir: PurePosixPath
    network: bool
    binds: tuple[Bind, ...] = ()
    host_dirs: tuple[str, ...] = DEFAULT_HOST_DIRS
    limits: Limits = field(default_factory=Limits)
    cpu_time_sec: int | None = None
    storage_bytes: int | None = None
    use_cgroups: bool = True
    start_timeout_sec: float = 30.0
    uid: int = field(default_factory=pick_uid)


@dataclass(frozen=True)
class CommandResult:
    return_code: int
    stdout: str | None
    stderr: str | None


class Sandbox:
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

    @property
    def root(self) -> Path:
        return self.spec.workspace / sandbox_janitor.ROOT_DIR

    @property
    def _tests_dir(self) -> Path:
        return self.spec.workspace / sandbox_janitor.TESTS_DIR

    def _host_folder(self, bind: Bind) -> Path:
        """Where the sandbox's writes to a bind land while it runs."""
        if not bind.log_folder or bind.read_only:
            return bind.source
        if bind.target == VERIFIER_LOGS:
            return self.spec.workspace / sandbox_janitor.VERIFIER_LOGS_DIR
        index = self.spec.binds.index(bind)
        return self.spec.workspace / sandbox_janitor.LOGS_DIR / str(index)

    @property
    def enforced_limits(self) -> frozenset[str]:
        """Which of "pids", "memory", "cpu", "storage" are enforced (by cgroups, by the pid namespace's
        pid_max, by the root's tmpfs)."""
        return (self._cgroup.enforced if self._cgroup else frozenset()) | self._extra_limits

    async def start(self) -> None:
        if os.geteuid() != 0:
            raise RuntimeError("the local environment needs root to run bubblewrap")
        self._tools = sandbox_command.host_tools(self.spec.host_dirs)
        if self.spec.uid < 1000:
            raise ValueError(f"sandbox uid {self.spec.uid} is root or a system account's")
        _check_reachable(self.spec.workspace.parent)
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

    async def reset_for_verifier(self) -> None:
        """Make the sandbox ready for a verifier: kill every process but pid 1 (whatever the agent
        left running could otherwise rig the verifier's output or read its secrets from
        /proc/<pid>/environ) and empty the verifier's log folder. No process that ran before
        survives, so none holds a file or folder of the new verifier output open."""
        control = self._control
        if control is None:
            raise RuntimeError("the sandbox is not running")
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

    def _prepare(self) -> None:
        """Blocking set-up: the root folder (on its tmpfs), the staged log folders and the cgroups."""
        (self.spec.workspace / "io").mkdir()
        root, uid = self.root, self.spec.uid
        root.mkdir()
        capped = [self._tests_dir, *self._log_mounts()]
        for folder in capped:
            folder.mkdir()
        if self.spec.storage_bytes is not None:
            try:
                for folder in (root, *capped):
                    storage.mount_tmpfs(folder, self.spec.storage_bytes, owner=uid)
                self._extra_limits.add("storage")
            except OSError as exc:
                self._log.warning("no storage cap: %s", exc)
        for path in (*_STICKY, *_SKELETON):
            (root / path).mkdir(parents=True, exist_ok=True)
        for path in (root, *capped, *_tree(root, (*_STICKY, *_SKELETON))):
            os.chown(path, uid, uid, follow_symlinks=False)
        for path in _STICKY:
            (root / path).chmod(0o1777)
        for name in sandbox_command.TOP_LEVEL_LINKS:
            host = Path("/", name)
            if host.is_symlink():
                (root / name).symlink_to(os.readlink(host))
        with contextlib.suppress(PermissionError):
            self.files.make_dirs(str(self.spec.workdir))
        self._stage_log_folders()
        if self.spec.use_cgroups:
            name = sandbox_janitor.cgroup_name(self.spec.workspace)
            self._cgroup = CgroupLeaf.create(name, self.spec.limits)
        if self.spec.limits.max_processes is not None and "pids" not in self.enforced_limits:
            # Counted per user namespace: the sandbox's own processes, whatever else the host runs.
            self._extra_limits.add("pids")

    def _log_mounts(self) -> list[Path]:
        """The workspace folders that hold staged log folders; each gets a capped tmpfs."""
        staged = {self._host_folder(b) for b in self.spec.binds if b.log_folder and not b.read_only}
        logs = self.spec.workspace / sandbox_janitor.LOGS_DIR
        verifier = self.spec.workspace / sandbox_janitor.VERIFIER_LOGS_DIR
        return [f for f in (logs, verifier) if f in staged or any(s.parent == f for s in staged)]

    def _stage_log_folders(self) -> None:
        """Hold the trial's log folders in the workspace while the sandbox runs (sandbox_logs.py)."""
        for bind in self.spec.binds:
            staged = self._host_folder(bind)
            if staged != bind.source:
                sandbox_logs.stage(self.spec.workspace, self.spec.uid, bind.source, staged)
                self._staged.append((bind.source, staged))

    def _unstage_log_folders(self) -> None:
        staged_folders, self._staged = self._staged, []
        for source, staged in staged_folders:
            sandbox_logs.unstage(source, staged, self._log)

    async def _spawn(self) -> None:
        info_r, info_w = os.pipe()
        ready_r, ready_w = os.pipe()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        procs_files = self._cgroup.procs_files if self._cgroup else []
        procs = [os.open(path, os.O_WRONLY | os.O_CLOEXEC) for path in procs_files]
        mounts = self._mount_fds()
        inherited = [info_w, ready_w, theirs.fileno(), *procs, *mounts.values()]
        try:
            with open(self.spec.workspace / "sandbox.log", "wb") as log:
                self._process = await asyncio.create_subprocess_exec(
                    *self._bwrap_argv(theirs.fileno(), ready_w, info_w, procs, mounts),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    pass_fds=inherited,
                    start_new_session=True,
                    cwd="/",
                    env={"PATH": HOST_PATH},
                )
            # Only the sandbox may hold these, so that its death reads as EOF here.
            theirs.close()
            for fd in (info_w, ready_w, *procs, *mounts.values()):
                os.close(fd)
            inherited = []
            self._control = SandboxControl(ours)
            await asyncio.wait_for(self._await_ready(ready_r, info_r), self.spec.start_timeout_sec)
        except BaseException:
            if self._control is None:
                ours.close()
            raise
        finally:
            for fd in (info_r, ready_r, *(fd for fd in inherited if fd != theirs.fileno())):
                os.close(fd)
            if inherited:
                theirs.close()

    def _mount_fds(self) -> dict[str, int]:
        """O_PATH descriptors of the host folders bubblewrap binds (it runs as the sandbox's uid, which
        may not be allowed to walk to them), and the public sandbox's resolv.conf as a pipe."""
        fds: dict[str, int] = {}
        try:
            fds["/"] = os.open(self.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            for bind in self.spec.binds:
                fds[str(bind.target)] = os.open(self._host_folder(bind), os.O_PATH | os.O_CLOEXEC)
            if self.spec.storage_bytes is not None:
                fds[str(TESTS)] = os.open(self._tests_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            if self.spec.network:
                read_end, write_end = os.pipe()
                fds["resolv.conf"] = read_end
                os.write(write_end, RESOLV_CONF)
                os.close(write_end)
        except BaseException:
            for fd in fds.values():
                os.close(fd)
            raise
        return fds

    def _bwrap_argv(
        self, control_fd: int, ready_fd: int, info_fd: int, procs_fds: list[int], mounts: dict[str, int]
    ) -> list[str]:
        binds = [(mounts[str(b.target)], b.target, b.read_only) for b in self.spec.binds]
        if self.spec.storage_bytes is not None:
            binds.append((mounts[str(TESTS)], TESTS, False))
        return sandbox_command.bwrap_argv(
            self.spec,
            self._tools,
            mounts["/"],
            binds,
            fds=(control_fd, ready_fd, info_fd, procs_fds),
            rlimits=self._rlimits(),
            resolv_conf_fd=mounts.get("resolv.conf"),
        )

    def _rlimits(self) -> dict[str, int]:
        """Per-command rlimits: RLIMIT_AS stands in for a missing memory cgroup, RLIMIT_NPROC for a
        missing pids cgroup (the kernel counts it per user namespace and applies it to the sandbox's
        "root", which is root in that namespace only); RLIMIT_FSIZE bounds a single file."""
        rlimits: dict[str, int] = {}
        cgroup_limits = self._cgroup.enforced if self._cgroup else frozenset()
        memory_bytes = self.spec.limits.memory_bytes
        if memory_bytes is not None and "memory" not in cgroup_limits:
            rlimits["RLIMIT_AS"] = memory_bytes
        max_processes = self.spec.limits.max_processes
        if max_processes is not None and "pids" not in cgroup_limits:
            rlimits["RLIMIT_NPROC"] = max_processes
        if self.spec.cpu_time_sec is not None:
            rlimits["RLIMIT_CPU"] = self.spec.cpu_time_sec
        if self.spec.storage_bytes is not None:
            rlimits["RLIMIT_FSIZE"] = self.spec.storage_bytes
        return rlimits

    async def _forbid_user_namespaces(self) -> None:
        assert self._pid1 is not None
        process = await asyncio.create_subprocess_exec(
            *sandbox_command.forbid_user_namespaces_argv(self._tools, self._pid1),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            cwd="/",
            env={"PATH": HOST_PATH},
        )
        _, err = await asyncio.wait_for(process.communicate(), self.spec.start_timeout_sec)
        if process.returncode != 0:
            raise RuntimeError(f"cannot forbid nested user namespaces: {err.decode(errors='replace')}")

    async def _await_ready(self, ready_fd: int, info_fd: int) -> None:
        ready = await subprocesses.read_until(ready_fd, lambda data: b"\n" in data)
        if not ready.startswith(b"ready"):
            raise RuntimeError("the sandbox exited before it was ready")
        info = json.loads(await subprocesses.read_until(info_fd, _is_json))
        pid1 = int(info["child-pid"])
        self._fds["pid1"] = os.pidfd_open(pid1)
        assert self._process is not None
        if self._process.returncode is not None:
            raise RuntimeError("the sandbox exited while starting")
        # The OOM killer must pick a command, never pid 1 (which would end the whole sandbox); pid 1
        # resets the score of every command it starts.
        with contextlib.suppress(OSError):
            Path(f"/proc/{pid1}/oom_score_adj").write_text("-1000")
        self._pid1 = pid1

    def _relieve_process_limit(self) -> None:
        """A sandbox at its process limit cannot start any command (a fork bomb left behind by an
        agent, typically). Kill everything in it but pid 1 so that later commands, such as the
        verifier's, can run."""
        assert self._cgroup is not None and self._pid1 is not None
        self._log.warning("the sandbox hit its process limit; killing all its processes")
        self._cgroup.kill(spare=frozenset({self._pid1}))


def _check_reachable(base: Path) -> None:
    """bubblewrap runs as the sandbox's uid and must walk to the workspace to bind its folders."""
    base.mkdir(mode=0o711, parents=True, exist_ok=True)
    for folder in (base, *base.parents):
        if not folder.stat().st_mode & 0o001:
            raise RuntimeError(
                f"the sandbox folder {base} must be reachable by unprivileged users, and {folder} is "
                "not (it needs o+x): sandboxes run as unprivileged uids"
            )


def _tree(root: Path, paths: tuple[str, ...]) -> set[Path]:
    """`paths` under `root` with every folder between."""
    found: set[Path] = set()
    for path in paths:
        relative = Path(path)
        found |= {root / parent for parent in relative.parents if parent != Path(".")}
        found.add(root / relative)
    return found


def _is_json(data: bytes) -> bool:
    try:
        json.loads(data)
        return True
    except ValueError:
        return False
