"""One long-lived bubblewrap sandbox per trial; commands enter it with nsenter, like `docker exec`.

A sandbox's workspace folder on the host holds `root/` (the sandbox's `/`), `io/` (output files of
running commands), `sandbox.log` (bubblewrap's own messages) and `.lock` (see sandbox_janitor).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shlex
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from regatta_executor import limits, sandbox_janitor, subprocesses
from regatta_executor.limits import CgroupLeaf, Limits
from regatta_executor.sandbox_files import SandboxFiles
from regatta_executor.subprocesses import OutputCallback

DEFAULT_HOST_DIRS = ("/usr", "/etc", "/opt", "/var")
_TOP_LEVEL_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_SKELETON = ("root", "tests", "solution", "logs/agent", "logs/verifier", "logs/artifacts")
_HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_BASE_ENV = {"PATH": _HOST_PATH, "HOME": "/root", "LANG": "C.UTF-8", "USER": "root"}
# Docker's default capability set minus MKNOD and NET_RAW: there is no device cgroup to make device
# nodes harmless, and a public-network sandbox shares the host's network namespace.
_CAPABILITIES = (
    "+chown,+dac_override,+fowner,+fsetid,+kill,+setgid,+setuid,+setpcap,"
    "+net_bind_service,+sys_chroot,+audit_write,+setfcap"
)
# Processes kept free for commands entered from outside: nsenter, setpriv, env and bash itself.
_PROCESS_RESERVE = 8

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Bind:
    source: Path
    target: PurePosixPath
    read_only: bool = False


@dataclass(frozen=True)
class SandboxSpec:
    workspace: Path
    workdir: PurePosixPath
    network: bool
    binds: tuple[Bind, ...] = ()
    host_dirs: tuple[str, ...] = DEFAULT_HOST_DIRS
    limits: Limits = field(default_factory=Limits)
    cpu_time_sec: int | None = None
    use_cgroups: bool = True
    start_timeout_sec: float = 30.0


@dataclass(frozen=True)
class CommandResult:
    return_code: int
    stdout: str | None
    stderr: str | None


class Sandbox:
    def __init__(self, spec: SandboxSpec, log: logging.Logger | None = None) -> None:
        self.spec = spec
        self._log = log or logger
        self._tools: dict[str, str] = {}
        self._cgroup: CgroupLeaf | None = None
        self._rlimits: list[str] = []
        self._process: asyncio.subprocess.Process | None = None
        self._pid1: int | None = None
        self._fds: dict[str, int] = {}
        self._running: set[asyncio.subprocess.Process] = set()
        self._commands = 0
        self._namespace_limits: frozenset[str] = frozenset()
        foreign = [PurePosixPath(p) for p in (*spec.host_dirs, "/proc", "/dev")]
        foreign += [b.target for b in spec.binds if b.read_only]
        writable = {b.target: b.source for b in spec.binds if not b.read_only}
        self.files = SandboxFiles(self.root, writable, foreign)

    @property
    def root(self) -> Path:
        return self.spec.workspace / "root"

    @property
    def enforced_limits(self) -> frozenset[str]:
        """Which of "pids", "memory", "cpu" are enforced (by cgroups, or pids by the pid namespace)."""
        return (self._cgroup.enforced if self._cgroup else frozenset()) | self._namespace_limits

    async def start(self) -> None:
        if os.geteuid() != 0:
            raise RuntimeError("the local environment needs root to run bubblewrap and nsenter")
        self._tools = {name: _tool(name) for name in ("bwrap", "nsenter", "prlimit", "setpriv")}
        await asyncio.to_thread(sandbox_janitor.sweep_once, self.spec.workspace.parent)
        self._fds["lock"] = sandbox_janitor.lock_workspace(self.spec.workspace)
        try:
            self._make_root()
            if self.spec.use_cgroups:
                name = sandbox_janitor.cgroup_name(self.spec.workspace)
                self._cgroup = await asyncio.to_thread(CgroupLeaf.create, name, self.spec.limits)
            self._rlimits = self._fallback_rlimits()
            await self._spawn()
            await self._cap_processes_without_cgroup()
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
        if self._pid1 is None:
            raise RuntimeError("the sandbox is not running")
        if self._cgroup is not None and self._cgroup.saturated(_PROCESS_RESERVE):
            await asyncio.to_thread(self._relieve_process_limit)
        self._commands += 1
        out_path = self.spec.workspace / "io" / f"{self._commands}.out"
        err_path = None if on_output else out_path.with_suffix(".err")
        capabilities = f"-all,{_CAPABILITIES}"
        argv = [
            self._tools["nsenter"], "-t", str(self._pid1), "-m", "-p", "-i", "-u", "-n", "-r", "-w", "--",
            self._tools["setpriv"], f"--inh-caps={capabilities}", f"--bounding-set={capabilities}", "--",
            "/usr/bin/env", "-C", cwd, "/bin/bash", "-c", command,
        ]  # fmt: skip
        # Output goes to files, not pipes: a background process keeping a pipe open would otherwise
        # hold the command until it exits (asyncio waits for the pipes), unlike `docker exec`.
        with open(out_path, "wb") as out, open(err_path or os.devnull, "wb") as err:
            process = await asyncio.create_subprocess_exec(
                *self._launcher(argv),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=err if err_path else asyncio.subprocess.STDOUT,
                start_new_session=True,
                cwd="/",
                env={**_BASE_ENV, **(env or {})},
            )
        self._running.add(process)
        streamer = None
        if on_output is not None:
            streamer = asyncio.create_task(subprocesses.stream_lines(out_path, process, on_output))
        try:
            await asyncio.wait_for(process.wait(), timeout_sec or None)
        except TimeoutError:
            await subprocesses.kill_group(process)
            raise RuntimeError(f"Command timed out after {timeout_sec} seconds") from None
        except BaseException:
            await subprocesses.kill_group(process)
            raise
        finally:
            self._running.discard(process)
            if streamer is not None:
                if process.returncode is None:
                    streamer.cancel()
                await asyncio.gather(streamer, return_exceptions=True)
            stdout = subprocesses.take_output(out_path)
            stderr = subprocesses.take_output(err_path) if err_path else None
        code = process.returncode or 0
        return CommandResult(return_code=128 - code if code < 0 else code, stdout=stdout, stderr=stderr)

    async def stop(self, *, delete: bool) -> None:
        """Kill every process of the sandbox, then delete its workspace or mark it kept. Idempotent."""
        self._pid1 = None
        if "pid1" in self._fds:
            # SIGKILL to the namespace's pid 1 makes the kernel kill everything else inside.
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._fds["pid1"], signal.SIGKILL)
        for process in list(self._running):
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
        if self._process is not None:
            subprocesses.kill(self._process)
            await self._process.wait()
        if self._cgroup is not None:
            cgroup, self._cgroup = self._cgroup, None
            await asyncio.to_thread(cgroup.remove)
        if delete:
            await asyncio.to_thread(sandbox_janitor.remove_workspace, self.spec.workspace)
        elif self.spec.workspace.is_dir():
            (self.spec.workspace / sandbox_janitor.KEPT_MARKER).touch()
        for name in list(self._fds):
            os.close(self._fds.pop(name))

    async def _spawn(self) -> None:
        info_r, info_w = os.pipe()
        ready_r, ready_w = os.pipe()
        keepalive_r, self._fds["keepalive"] = os.pipe()
        inherited = (info_w, ready_w, keepalive_r)
        try:
            with open(self.spec.workspace / "sandbox.log", "wb") as log:
                self._process = await asyncio.create_subprocess_exec(
                    *self._launcher(self._bwrap_argv(*inherited)),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    pass_fds=inherited,
                    start_new_session=True,
                    cwd="/",
                    env={"PATH": _HOST_PATH},
                )
            # Only the sandbox may hold the write ends, so that its death reads as EOF here.
            for fd in inherited:
                os.close(fd)
            inherited = ()
            await asyncio.wait_for(self._await_ready(ready_r, info_r), self.spec.start_timeout_sec)
        finally:
            for fd in (info_r, ready_r, *inherited):
                os.close(fd)

    def _make_root(self) -> None:
        (self.spec.workspace / "io").mkdir()
        root = self.root
        root.mkdir()
        (root / "tmp").mkdir()
        (root / "tmp").chmod(0o1777)
        for path in _SKELETON:
            (root / path).mkdir(parents=True, exist_ok=True)
        for name in _TOP_LEVEL_LINKS:
            host = Path("/", name)
            if host.is_symlink():
                (root / name).symlink_to(os.readlink(host))
        with contextlib.suppress(PermissionError):
            self.files.make_dirs(str(self.spec.workdir))

    def _bwrap_argv(self, info_fd: int, ready_fd: int, keepalive_fd: int) -> list[str]:
        argv = [self._tools["bwrap"], "--bind", str(self.root), "/"]
        for host_dir in (*self.spec.host_dirs, *(f"/{n}" for n in _TOP_LEVEL_LINKS)):
            if Path(host_dir).is_dir() and not Path(host_dir).is_symlink():
                argv += ["--ro-bind", host_dir, host_dir]
        for bind in self.spec.binds:
            argv += ["--ro-bind" if bind.read_only else "--bind", str(bind.source), str(bind.target)]
        argv += ["--dev", "/dev", "--proc", "/proc"]
        argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", "sandbox"]
        if not self.spec.network:
            argv.append("--unshare-net")
        argv += ["--die-with-parent", "--as-pid-1", "--cap-drop", "ALL", "--chdir", str(self.spec.workdir)]
        # pid 1 reports readiness only once bwrap has finished the mounts (its --info-fd comes too
        # early), then reaps orphans while it blocks on a pipe whose write end only the executor
        # holds: the sandbox ends by itself if the executor dies. It starts no child of its own, and
        # as a pid 1 it ignores signals sent from inside its namespace.
        init = (
            f"echo ready >&{ready_fd}; exec {ready_fd}>&- {info_fd}>&-; "
            f"while read -r -u {keepalive_fd} _; do :; done"
        )
        return [*argv, "--info-fd", str(info_fd), "/bin/bash", "-c", init]

    def _launcher(self, argv: list[str]) -> list[str]:
        """Prefix that puts the process into the sandbox's cgroups and rlimits *before* it forks."""
        prefix: list[str] = []
        if self._cgroup is not None:
            joins = " && ".join(f"echo $$ > {shlex.quote(str(p))}" for p in self._cgroup.procs_files)
            prefix += ["/bin/sh", "-c", f'{joins} && exec "$@"', "sh"]
        if self._rlimits:
            prefix += [self._tools["prlimit"], *self._rlimits, "--"]
        return prefix + argv

    def _fallback_rlimits(self) -> list[str]:
        memory_bytes = self.spec.limits.memory_bytes
        rlimits = []
        if memory_bytes is not None and "memory" not in self.enforced_limits:
            rlimits.append(f"--as={memory_bytes}")
        if self.spec.cpu_time_sec is not None:
            rlimits.append(f"--cpu={self.spec.cpu_time_sec}")
        return rlimits

    async def _cap_processes_without_cgroup(self) -> None:
        """RLIMIT_NPROC would be no use here: the kernel does not apply it to root."""
        max_processes = self.spec.limits.max_processes
        if max_processes is None or "pids" in self.enforced_limits:
            return
        assert self._pid1 is not None
        if await limits.cap_pid_namespace(self._tools["nsenter"], self._pid1, max_processes):
            self._namespace_limits = frozenset({"pids"})
        else:
            self._log.warning("no pids cgroup, no per-namespace pid_max: the process limit is not enforced")

    async def _await_ready(self, ready_fd: int, info_fd: int) -> None:
        ready = await subprocesses.read_until(ready_fd, lambda data: b"\n" in data)
        if not ready.startswith(b"ready"):
            raise RuntimeError("the sandbox exited before it was ready")
        info = json.loads(await subprocesses.read_until(info_fd, _is_json))
        self._fds["pid1"] = os.pidfd_open(int(info["child-pid"]))
        assert self._process is not None
        if self._process.returncode is not None:
            raise RuntimeError("the sandbox exited while starting")
        self._pid1 = int(info["child-pid"])

    def _relieve_process_limit(self) -> None:
        """A sandbox at its process limit cannot start any command (a fork bomb left behind by an
        agent, typically). Kill everything in it but pid 1 and bwrap so that later commands, such as
        the verifier's, can run."""
        assert self._cgroup is not None and self._process is not None and self._pid1 is not None
        self._log.warning("the sandbox hit its process limit; killing all its processes")
        self._cgroup.kill(spare=frozenset({self._pid1, self._process.pid}))


def _tool(name: str) -> str:
    path = shutil.which(name, path=_HOST_PATH)
    if path is None:
        raise RuntimeError(f"the local environment needs {name!r} on the host (bubblewrap, util-linux)")
    return path


def _is_json(data: bytes) -> bool:
    try:
        json.loads(data)
        return True
    except ValueError:
        return False
