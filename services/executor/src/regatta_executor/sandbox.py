"""One long-lived bubblewrap sandbox per trial; commands enter it with nsenter, like `docker exec`.

Layout of a sandbox's workspace folder on the host: `root/` is the sandbox's `/`, `io/` holds the output
files of running commands and `sandbox.log` collects bubblewrap's own messages.
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
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from regatta_executor.cgroups import CgroupLeaf, Limits
from regatta_executor.sandbox_files import SandboxFiles

HOST_READ_ONLY_DIRS = ("/usr", "/etc", "/opt", "/var")
_TOP_LEVEL_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_SKELETON = ("root", "tests", "solution", "logs/agent", "logs/verifier", "logs/artifacts")
_HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_BASE_ENV = {"PATH": _HOST_PATH, "HOME": "/root", "LANG": "C.UTF-8", "USER": "root"}
# Docker's default capability set minus MKNOD and NET_RAW: there is no device cgroup to make device
# nodes harmless, and a public-network sandbox shares the host's network namespace.
_CAPABILITIES = "chown,dac_override,fowner,fsetid,kill,setgid,setuid,setpcap,net_bind_service,sys_chroot,audit_write,setfcap"
# Processes kept free for commands entered from outside: nsenter, setpriv, env and bash itself.
_PROCESS_RESERVE = 8
_STREAM_POLL_SEC = 0.1

OutputCallback = Callable[[str, str], Awaitable[None]]

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
        self._cgroup: CgroupLeaf | None = None
        self._rlimits: list[str] = []
        self._process: asyncio.subprocess.Process | None = None
        self._pid1: int | None = None
        self._pid1_fd: int | None = None
        self._keepalive_fd: int | None = None
        self._running: set[asyncio.subprocess.Process] = set()
        self._commands = 0
        self._tools: dict[str, str] = {}
        foreign = [PurePosixPath(p) for p in (*HOST_READ_ONLY_DIRS, "/proc", "/dev")]
        foreign += [b.target for b in spec.binds if b.read_only]
        writable = {b.target: b.source for b in spec.binds if not b.read_only}
        self.files = SandboxFiles(self.root, writable, foreign)

    @property
    def root(self) -> Path:
        return self.spec.workspace / "root"

    @property
    def enforced_limits(self) -> frozenset[str]:
        return self._cgroup.enforced if self._cgroup else frozenset()

    async def start(self) -> None:
        if os.geteuid() != 0:
            raise RuntimeError("the local environment needs root to run bubblewrap and nsenter")
        self._tools = {name: _tool(name) for name in ("bwrap", "nsenter", "prlimit", "setpriv")}
        self._make_root()
        if self.spec.use_cgroups:
            self._cgroup = CgroupLeaf.create(f"regatta-{self.spec.workspace.name}", self.spec.limits)
        self._rlimits = self._fallback_rlimits()
        info_r, info_w = os.pipe()
        ready_r, ready_w = os.pipe()
        keep_r, self._keepalive_fd = os.pipe()
        try:
            with open(self.spec.workspace / "sandbox.log", "wb") as log:
                self._process = await asyncio.create_subprocess_exec(
                    *self._launcher(self._bwrap_argv(info_w, ready_w, keep_r)),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    pass_fds=(info_w, ready_w, keep_r),
                    start_new_session=True,
                    cwd="/",
                    env={"PATH": _HOST_PATH},
                )
            os.close(info_w)
            os.close(ready_w)
            os.close(keep_r)
            info_w = ready_w = keep_r = -1
            await asyncio.wait_for(self._await_ready(ready_r, info_r), self.spec.start_timeout_sec)
        except BaseException as exc:
            await self.stop(delete=False)
            try:
                message = (self.spec.workspace / "sandbox.log").read_text(errors="replace").strip()
            except OSError:
                message = ""
            if isinstance(exc, Exception):
                raise RuntimeError(f"bubblewrap sandbox failed to start: {message or exc!r}") from exc
            raise
        finally:
            for fd in (info_r, info_w, ready_r, ready_w, keep_r):
                if fd >= 0:
                    os.close(fd)

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
        argv = [
            self._tools["nsenter"], "-t", str(self._pid1), "-m", "-p", "-i", "-u", "-n", "-r", "-w", "--",
            self._tools["setpriv"], f"--inh-caps=-all,+{_CAPABILITIES.replace(',', ',+')}",
            f"--bounding-set=-all,+{_CAPABILITIES.replace(',', ',+')}", "--",
            "/usr/bin/env", "-C", cwd, "/bin/bash", "-c", command,
        ]  # fmt: skip
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
        streamer = asyncio.create_task(_stream(out_path, process, on_output)) if on_output else None
        try:
            await asyncio.wait_for(process.wait(), timeout_sec or None)
        except TimeoutError:
            await _kill_group(process)
            raise RuntimeError(f"Command timed out after {timeout_sec} seconds") from None
        except BaseException:
            await _kill_group(process)
            raise
        finally:
            self._running.discard(process)
            if streamer is not None:
                if process.returncode is None:
                    streamer.cancel()
                await asyncio.gather(streamer, return_exceptions=True)
            stdout, stderr = _take(out_path), (_take(err_path) if err_path else None)
        code = process.returncode or 0
        return CommandResult(return_code=128 - code if code < 0 else code, stdout=stdout, stderr=stderr)

    async def stop(self, *, delete: bool) -> None:
        """Kill every process of the sandbox, then optionally delete its workspace. Idempotent."""
        self._pid1 = None
        if self._pid1_fd is not None:
            # SIGKILL to the namespace's pid 1 makes the kernel kill everything else inside.
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pid1_fd, signal.SIGKILL)
            os.close(self._pid1_fd)
            self._pid1_fd = None
        if self._keepalive_fd is not None:
            os.close(self._keepalive_fd)
            self._keepalive_fd = None
        for process in list(self._running):
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
        if self._process is not None:
            # Not Process.kill(): Popen polls (and so reaps) the child first, racing asyncio's watcher.
            if self._process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self._process.pid, signal.SIGKILL)
            await self._process.wait()
        if self._cgroup is not None:
            cgroup, self._cgroup = self._cgroup, None
            await asyncio.to_thread(cgroup.remove)
        if delete:
            await asyncio.to_thread(self._delete_workspace)

    def _make_root(self) -> None:
        self.spec.workspace.mkdir(parents=True)
        (self.spec.workspace / "io").mkdir()
        root = self.root
        root.mkdir()
        (root / "tmp").mkdir(mode=0o1777)
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
        for host_dir in (*HOST_READ_ONLY_DIRS, *(f"/{n}" for n in _TOP_LEVEL_LINKS)):
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
        limits, enforced = self.spec.limits, self.enforced_limits
        rlimits = []
        if limits.memory_bytes is not None and "memory" not in enforced:
            rlimits.append(f"--as={limits.memory_bytes}")
        if limits.max_processes is not None and "pids" not in enforced:
            if os.geteuid() == 0:
                self._log.warning("no pids cgroup: the process limit is not enforced for root")
            rlimits.append(f"--nproc={limits.max_processes}")
        if self.spec.cpu_time_sec is not None:
            rlimits.append(f"--cpu={self.spec.cpu_time_sec}")
        return rlimits

    async def _await_ready(self, ready_fd: int, info_fd: int) -> None:
        ready = await _read_until(ready_fd, lambda data: b"\n" in data)
        if not ready.startswith(b"ready"):
            raise RuntimeError("the sandbox exited before it was ready")
        info = json.loads(await _read_until(info_fd, _is_json))
        self._pid1 = int(info["child-pid"])
        self._pid1_fd = os.pidfd_open(self._pid1)
        assert self._process is not None
        if self._process.returncode is not None:
            raise RuntimeError("the sandbox exited while starting")

    def _relieve_process_limit(self) -> None:
        """A sandbox at its process limit cannot start any command (a fork bomb left behind by an
        agent, typically). Kill everything in it except its pid 1 and bwrap so later commands such as
        the verifier's can run."""
        assert self._cgroup is not None and self._process is not None and self._pid1 is not None
        self._log.warning("the sandbox hit its process limit; killing all its processes")
        self._cgroup.kill(spare=frozenset({self._pid1, self._process.pid}))

    def _delete_workspace(self) -> None:
        workspace = str(self.spec.workspace)
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            mount_point = line.split()[4]
            if mount_point == workspace or mount_point.startswith(workspace + "/"):
                raise RuntimeError(f"refusing to delete {workspace}: {mount_point} is mounted inside")
        shutil.rmtree(self.spec.workspace, ignore_errors=True)


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


async def _read_until(fd: int, done: Callable[[bytes], bool]) -> bytes:
    """Read a pipe without blocking the event loop until `done(data)` or EOF."""
    os.set_blocking(fd, False)
    loop = asyncio.get_running_loop()
    data = b""
    while not done(data):
        readable: asyncio.Future[None] = loop.create_future()
        loop.add_reader(fd, _resolve_once, readable)
        try:
            await readable
        finally:
            loop.remove_reader(fd)
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            continue
        if not chunk:
            break
        data += chunk
    return data


def _resolve_once(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _kill_group(process: asyncio.subprocess.Process) -> None:
    """SIGKILL the command's process group (start_new_session made its pid the group id) until the
    group is empty. Only processes that started their own session survive, as in `docker exec`."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    await process.wait()
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        await asyncio.sleep(0.01)


async def _stream(path: Path, process: asyncio.subprocess.Process, on_output: OutputCallback) -> None:
    """Relay complete output lines while the command runs; the output file keeps the full copy."""
    position, pending = 0, b""
    while True:
        finished = process.returncode is not None
        with open(path, "rb") as file:
            file.seek(position)
            chunk = file.read()
        position += len(chunk)
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            await on_output(line.decode(errors="replace") + "\n", "stdout")
        if finished:
            if pending:
                await on_output(pending.decode(errors="replace"), "stdout")
            return
        await asyncio.sleep(_STREAM_POLL_SEC)


def _take(path: Path) -> str | None:
    try:
        data = path.read_bytes()
        path.unlink()
    except FileNotFoundError:
        return None
    return data.decode(errors="replace") or None
