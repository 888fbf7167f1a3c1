"""One long-lived bubblewrap sandbox per trial; its pid 1 starts commands on request, like `docker exec`.

A sandbox's workspace folder on the host holds `root/` (the sandbox's `/`, a size-limited tmpfs when a
storage cap is set), `tests/` (the sandbox's /tests: a tmpfs of its own, so that an agent that filled
its root cannot keep the verifier's tests out), `io/` (output files of running commands),
`sandbox.log` (bubblewrap's own messages) and `.lock` (see sandbox_janitor).

Commands are not entered from outside with nsenter: pid 1 (sandbox_init.py, run by the host's python3)
already sits in the sandbox's namespaces, cgroups and capability set and forks them itself, so a command
costs one fork and one exec instead of a chain of five processes (measured: docs/performance.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import shutil
import signal
import socket
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath

from regatta_executor import limits, sandbox_janitor, storage, subprocesses
from regatta_executor.limits import CgroupLeaf, Limits
from regatta_executor.sandbox_files import SandboxFiles
from regatta_executor.subprocesses import OutputCallback

DEFAULT_HOST_DIRS = ("/usr", "/etc", "/opt", "/var")
TESTS = PurePosixPath("/tests")
_TOP_LEVEL_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_SKELETON = ("root", "tests", "solution", "logs/agent", "logs/verifier", "logs/artifacts")
_HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_BASE_ENV = {"PATH": _HOST_PATH, "HOME": "/root", "LANG": "C.UTF-8", "USER": "root"}
# Docker's default capability set minus MKNOD and NET_RAW: there is no device cgroup to make device
# nodes harmless, and a public-network sandbox shares the host's network namespace.
_CAPABILITIES = (
    "chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
    "net_bind_service", "sys_chroot", "audit_write", "setfcap",
)  # fmt: skip
# Processes kept free for a new command: pid 1's fork and what bash starts first.
_PROCESS_RESERVE = 4
# Commands larger than this travel in a memfd instead of the control message.
_INLINE_LIMIT = 32 * 1024
_KILL_GRACE_SEC = 5.0

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
    storage_bytes: int | None = None
    use_cgroups: bool = True
    start_timeout_sec: float = 30.0


@dataclass(frozen=True)
class CommandResult:
    return_code: int
    stdout: str | None
    stderr: str | None


class SandboxGone(RuntimeError):
    """The sandbox's pid 1 is gone: the sandbox was stopped, or died."""


class _Control:
    """The executor's end of the control socket to the sandbox's pid 1 (protocol: sandbox_init.py)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._loop = asyncio.get_running_loop()
        self._pending: dict[str, asyncio.Future[int]] = {}
        self._closed = False
        sock.setblocking(False)
        self._loop.add_reader(sock.fileno(), self._on_readable)

    async def run(self, command_id: str, cwd: str, command: str, env: dict[str, str], fds: list[int]) -> None:
        """Ask pid 1 to start a command; its return code arrives on `result(command_id)`."""
        fields = [cwd, command, *(f"{k}={v}" for k, v in env.items())]
        if any("\0" in value for value in fields):
            raise ValueError("a command, its environment and its cwd cannot contain NUL characters")
        payload = "\0".join(fields).encode()
        self._pending[command_id] = self._loop.create_future()
        if len(payload) <= _INLINE_LIMIT:
            await self._send(b"run\0" + command_id.encode() + b"\0" + payload, fds)
            return
        memfd = os.memfd_create("regatta-command", os.MFD_CLOEXEC)
        try:
            os.write(memfd, payload)
            os.lseek(memfd, 0, os.SEEK_SET)
            await self._send(b"runfd\0" + command_id.encode(), [*fds, memfd])
        finally:
            os.close(memfd)

    def result(self, command_id: str) -> asyncio.Future[int]:
        return self._pending[command_id]

    def kill(self, command_id: str) -> None:
        """SIGKILL the command's process group. Best effort: stop() kills everything anyway."""
        with contextlib.suppress(OSError):
            self._sock.sendmsg([b"kill\0" + command_id.encode()])

    def forget(self, command_id: str) -> None:
        self._pending.pop(command_id, None)

    def close(self, reason: str) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(SandboxGone(reason))
                future.exception()  # retrieved here: nobody may be waiting any more
        self._pending.clear()

    async def _send(self, message: bytes, fds: list[int]) -> None:
        rights = b"".join(fd.to_bytes(4, "little") for fd in fds)
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)] if fds else []
        while True:
            if self._closed:
                raise SandboxGone("the sandbox is not running")
            try:
                self._sock.sendmsg([message], ancillary)
                return
            except BlockingIOError:
                writable: asyncio.Future[None] = self._loop.create_future()
                self._loop.add_writer(self._sock.fileno(), _resolve, writable)
                try:
                    await writable
                finally:
                    self._loop.remove_writer(self._sock.fileno())
            except (BrokenPipeError, ConnectionResetError):
                self.close("the sandbox's pid 1 exited")
                raise SandboxGone("the sandbox's pid 1 exited") from None

    def _on_readable(self) -> None:
        while not self._closed:
            try:
                data = self._sock.recv(4096)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self.close("the sandbox's pid 1 exited")
                return
            verb, command_id, value = data.decode(errors="replace").split("\0", 2)
            future = self._pending.get(command_id)
            if future is None or future.done():
                continue
            if verb == "exit":
                future.set_result(int(value))
            else:
                future.set_exception(_StartFailed(value))


class _StartFailed(RuntimeError):
    """pid 1 could not fork the command (typically: the sandbox is at its process limit)."""


class Sandbox:
    def __init__(self, spec: SandboxSpec, log: logging.Logger | None = None) -> None:
        self.spec = spec
        self._log = log or logger
        self._tools: dict[str, str] = {}
        self._cgroup: CgroupLeaf | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._control: _Control | None = None
        self._pid1: int | None = None
        self._fds: dict[str, int] = {}
        self._commands = 0
        self._extra_limits: set[str] = set()
        foreign = [PurePosixPath(p) for p in (*spec.host_dirs, "/proc", "/dev")]
        foreign += [b.target for b in spec.binds if b.read_only]
        writable = {b.target: b.source for b in spec.binds if not b.read_only}
        if spec.storage_bytes is not None:
            writable[TESTS] = self._tests_dir
        self.files = SandboxFiles(self.root, writable, foreign)

    @property
    def root(self) -> Path:
        return self.spec.workspace / sandbox_janitor.ROOT_DIR

    @property
    def _tests_dir(self) -> Path:
        return self.spec.workspace / sandbox_janitor.TESTS_DIR

    @property
    def enforced_limits(self) -> frozenset[str]:
        """Which of "pids", "memory", "cpu", "storage" are enforced (by cgroups, by the pid namespace's
        pid_max, by the root's tmpfs)."""
        return (self._cgroup.enforced if self._cgroup else frozenset()) | self._extra_limits

    async def start(self) -> None:
        if os.geteuid() != 0:
            raise RuntimeError("the local environment needs root to run bubblewrap")
        python = _python(self.spec.host_dirs)
        self._tools = {"bwrap": _tool("bwrap"), "setpriv": _tool("setpriv"), "python3": python}
        if not sandbox_janitor.swept(self.spec.workspace.parent):
            await asyncio.to_thread(sandbox_janitor.sweep_once, self.spec.workspace.parent)
        self._fds["lock"] = sandbox_janitor.lock_workspace(self.spec.workspace)
        try:
            # A millisecond of mkdir/mount/cgroup writes: cheaper inline than a hop to a thread.
            self._prepare()
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
                except _StartFailed as exc:
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

    async def stop(self, *, delete: bool) -> None:
        """Kill every process of the sandbox, then delete its workspace or mark it kept. Idempotent."""
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
        control: _Control,
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
        self, control: _Control, command_id: str, done: asyncio.Future[int], timeout_sec: float | None
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
        """Blocking set-up, in a thread: the root folder (on its tmpfs) and the cgroups."""
        (self.spec.workspace / "io").mkdir()
        root = self.root
        root.mkdir()
        if self.spec.storage_bytes is not None:
            self._tests_dir.mkdir()
            try:
                storage.mount_tmpfs(root, self.spec.storage_bytes)
                storage.mount_tmpfs(self._tests_dir, self.spec.storage_bytes)
                self._extra_limits.add("storage")
            except OSError as exc:
                self._log.warning("no storage cap: %s", exc)
        for path in ("tmp", *_SKELETON):
            (root / path).mkdir(parents=True, exist_ok=True)
        (root / "tmp").chmod(0o1777)
        for name in _TOP_LEVEL_LINKS:
            host = Path("/", name)
            if host.is_symlink():
                (root / name).symlink_to(os.readlink(host))
        with contextlib.suppress(PermissionError):
            self.files.make_dirs(str(self.spec.workdir))
        if self.spec.use_cgroups:
            name = sandbox_janitor.cgroup_name(self.spec.workspace)
            self._cgroup = CgroupLeaf.create(name, self.spec.limits)

    async def _spawn(self) -> None:
        info_r, info_w = os.pipe()
        ready_r, ready_w = os.pipe()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        procs_files = self._cgroup.procs_files if self._cgroup else []
        procs = [os.open(path, os.O_WRONLY | os.O_CLOEXEC) for path in procs_files]
        inherited = [info_w, ready_w, theirs.fileno(), *procs]
        try:
            with open(self.spec.workspace / "sandbox.log", "wb") as log:
                self._process = await asyncio.create_subprocess_exec(
                    *self._bwrap_argv(theirs.fileno(), ready_w, info_w, procs),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    pass_fds=inherited,
                    start_new_session=True,
                    cwd="/",
                    env={"PATH": _HOST_PATH},
                )
            # Only the sandbox may hold these, so that its death reads as EOF here.
            theirs.close()
            for fd in (info_w, ready_w, *procs):
                os.close(fd)
            inherited = []
            self._control = _Control(ours)
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

    def _bwrap_argv(self, control_fd: int, ready_fd: int, info_fd: int, procs_fds: list[int]) -> list[str]:
        argv = [self._tools["bwrap"], "--bind", str(self.root), "/"]
        for host_dir in _real_dirs((*self.spec.host_dirs, *(f"/{n}" for n in _TOP_LEVEL_LINKS))):
            argv += ["--ro-bind", host_dir, host_dir]
        for bind in self.spec.binds:
            argv += ["--ro-bind" if bind.read_only else "--bind", str(bind.source), str(bind.target)]
        if self.spec.storage_bytes is not None:
            argv += ["--bind", str(self._tests_dir), str(TESTS)]
        argv += ["--dev", "/dev", "--proc", "/proc"]
        argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", "sandbox"]
        if not self.spec.network:
            argv.append("--unshare-net")
        argv += ["--die-with-parent", "--as-pid-1", "--chdir", str(self.spec.workdir), "--cap-drop", "ALL"]
        for capability in _CAPABILITIES:
            argv += ["--cap-add", f"CAP_{capability.upper()}"]
        # bwrap leaves the bounding set full; setpriv narrows it so that no file-capability binary can
        # regain a dropped capability. pid 1 reports readiness only once bwrap has finished the mounts
        # (bwrap's --info-fd comes too early), and exits when the executor's end of the socket closes.
        bounding = "-all," + ",".join(f"+{c}" for c in _CAPABILITIES)
        init_args = [str(control_fd), str(ready_fd), str(info_fd), *(f"cgroup={fd}" for fd in procs_fds)]
        init_args += [f"{name}={value}" for name, value in self._rlimits().items()]
        return [
            *argv, "--info-fd", str(info_fd), "--",
            self._tools["setpriv"], f"--bounding-set={bounding}", "--",
            self._tools["python3"], "-I", "-S", "-X", "frozen_modules=on", "-c", _init_source(), *init_args,
        ]  # fmt: skip

    def _rlimits(self) -> dict[str, int]:
        """Per-command rlimits: RLIMIT_AS stands in for a missing memory cgroup; RLIMIT_FSIZE bounds a
        single file, also in the log folders, which are on the host's disk rather than the tmpfs."""
        rlimits: dict[str, int] = {}
        memory_bytes = self.spec.limits.memory_bytes
        if memory_bytes is not None and "memory" not in self.enforced_limits:
            rlimits["RLIMIT_AS"] = memory_bytes
        if self.spec.cpu_time_sec is not None:
            rlimits["RLIMIT_CPU"] = self.spec.cpu_time_sec
        if self.spec.storage_bytes is not None:
            rlimits["RLIMIT_FSIZE"] = self.spec.storage_bytes
        return rlimits

    async def _cap_processes_without_cgroup(self) -> None:
        """RLIMIT_NPROC would be no use here: the kernel does not apply it to root."""
        max_processes = self.spec.limits.max_processes
        if max_processes is None or "pids" in self.enforced_limits:
            return
        assert self._pid1 is not None
        nsenter = shutil.which("nsenter", path=_HOST_PATH)
        if nsenter and await limits.cap_pid_namespace(nsenter, self._pid1, max_processes):
            self._extra_limits.add("pids")
        else:
            self._log.warning("no pids cgroup, no per-namespace pid_max: the process limit is not enforced")

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


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@functools.cache
def _init_source() -> str:
    return resources.files("regatta_executor").joinpath("sandbox_init.py").read_text()


@functools.cache
def _python(host_dirs: tuple[str, ...]) -> str:
    """The host's python3, as long as the sandbox sees it at the same path (through /usr)."""
    found = shutil.which("python3", path=_HOST_PATH)
    visible = [Path(d) for d in host_dirs]
    if found is None or not any(Path(found).resolve().is_relative_to(d) for d in visible):
        raise RuntimeError(f"the local environment needs python3 in one of {host_dirs}")
    return found


@functools.cache
def _real_dirs(paths: tuple[str, ...]) -> tuple[str, ...]:
    """The folders among `paths` that are not symlinks (those are recreated as links in the root)."""
    return tuple(p for p in paths if Path(p).is_dir() and not Path(p).is_symlink())


@functools.cache
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
