"""The start of a bubblewrap sandbox (the base of `Sandbox`, sandbox.py): the workspace's blocking
set-up (root folder and capped tmpfs mounts, staged log folders, cgroups), then bubblewrap spawned
with the descriptors it binds and the rlimits that stand in for missing cgroups, and pid 1 awaited.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from pathlib import Path

from regatta_executor.local import command as sandbox_command
from regatta_executor.local import janitor as sandbox_janitor
from regatta_executor.local import logs as sandbox_logs
from regatta_executor.local import storage, subprocesses
from regatta_executor.local.command import HOST_PATH
from regatta_executor.local.control import SandboxControl
from regatta_executor.local.files import SandboxFiles
from regatta_executor.local.limits import CgroupLeaf
from regatta_executor.local.network import RESOLV_CONF
from regatta_executor.local.spec import TESTS, VERIFIER_LOGS, Bind, SandboxSpec

_SKELETON = (
    "root", "tests", "solution", "logs/agent", "logs/verifier", "logs/artifacts", "run",
    "var/lib", "var/cache", "var/log", "var/spool",
)  # fmt: skip
_STICKY = ("tmp", "var/tmp")


class SandboxSetup:
    """Everything `Sandbox.start` does before the sandbox's first command; the state it sets is the
    sandbox's (made in `Sandbox.__init__`)."""

    spec: SandboxSpec
    files: SandboxFiles
    _log: logging.Logger
    _tools: dict[str, str]
    _cgroup: CgroupLeaf | None
    _process: asyncio.subprocess.Process | None
    _control: SandboxControl | None
    _pid1: int | None
    _fds: dict[str, int]
    _extra_limits: set[str]
    _staged: list[tuple[Path, Path]]

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
        """Hold the trial's log folders in the workspace while the sandbox runs (logs.py)."""
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


def check_reachable(base: Path) -> None:
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
