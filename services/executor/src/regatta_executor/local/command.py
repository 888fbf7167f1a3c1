"""The command line that starts a sandbox: setpriv dropping to the sandbox's unprivileged host uid,
bubblewrap's user namespace, mounts and other namespaces, setpriv's capability bounding set, and pid 1
(init.py, run by the host's python3) with its file descriptors.

bubblewrap runs as an unprivileged host uid and maps it to root in a new user namespace: "root" inside
holds capabilities over the sandbox's own namespaces only. Host files owned by host root (kernel
tunables under /proc/sys, /etc/shadow, private keys) appear owned by an unmapped user, so the sandbox
can neither write the former nor read the latter whatever its capabilities inside."""

from __future__ import annotations

import functools
import shutil
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from regatta_executor.local.spec import SandboxSpec

HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Top-level folders that are symlinks on merged-/usr hosts: recreated as links in the sandbox's root.
TOP_LEVEL_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Docker's default capability set minus MKNOD and NET_RAW, all of them confined to the sandbox's user
# namespace; NET_ADMIN stays out so that a sandbox cannot lift the routes that keep host addresses out.
_CAPABILITIES = (
    "chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
    "net_bind_service", "sys_chroot", "audit_write", "setfcap",
)  # fmt: skip


def host_tools(host_dirs: tuple[str, ...]) -> dict[str, str]:
    return {
        "bwrap": _tool("bwrap"),
        "setpriv": _tool("setpriv"),
        "nsenter": _tool("nsenter"),
        "python3": _python(host_dirs),
    }


def bwrap_argv(
    spec: SandboxSpec,
    tools: dict[str, str],
    root_fd: int,
    binds: list[tuple[int, PurePosixPath, bool]],
    *,
    fds: tuple[int, int, int, list[int]],
    rlimits: dict[str, int],
    resolv_conf_fd: int | None = None,
) -> list[str]:
    """`root_fd` and `binds`: O_PATH descriptors of the host folders (with their sandbox path and
    whether read-only), opened by the executor: bubblewrap runs as the sandbox's uid, which may not
    be allowed to walk to them. `fds`: pid 1's control socket, its readiness pipe, bwrap's info pipe
    and the cgroup.procs files pid 1 moves each command into."""
    control_fd, ready_fd, info_fd, procs_fds = fds
    argv = [tools["bwrap"], "--unshare-user", "--uid", "0", "--gid", "0", "--bind-fd", str(root_fd), "/"]
    for host_dir in _real_dirs((*spec.host_dirs, *(f"/{n}" for n in TOP_LEVEL_LINKS))):
        argv += ["--ro-bind", host_dir, host_dir]
    for masked in _masked_files(spec.host_dirs):
        argv += ["--ro-bind", "/dev/null", masked]
    if resolv_conf_fd is not None:
        argv += ["--ro-bind-data", str(resolv_conf_fd), "/etc/resolv.conf"]
    for source_fd, target, read_only in binds:
        argv += ["--ro-bind-fd" if read_only else "--bind-fd", str(source_fd), str(target)]
    argv += ["--dev", "/dev", "--proc", "/proc"]
    # The network namespace is always the sandbox's own: a public sandbox reaches out through
    # slirp4netns (network.py), never through the host's interfaces and loopback.
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--hostname", "sandbox"]
    argv += ["--die-with-parent", "--as-pid-1", "--chdir", str(spec.workdir), "--cap-drop", "ALL"]
    for capability in _CAPABILITIES:
        argv += ["--cap-add", f"CAP_{capability.upper()}"]
    # bwrap leaves the bounding set full; setpriv narrows it so that no file-capability binary can
    # regain a dropped capability. pid 1 reports readiness only once bwrap has finished the mounts
    # (bwrap's --info-fd comes too early), and exits when the executor's end of the socket closes.
    bounding = "-all," + ",".join(f"+{c}" for c in _CAPABILITIES)
    init_args = [str(control_fd), str(ready_fd), str(info_fd), *(f"cgroup={fd}" for fd in procs_fds)]
    init_args += [f"{name}={value}" for name, value in rlimits.items()]
    drop_to_sandbox_uid = [
        tools["setpriv"], f"--reuid={spec.uid}", f"--regid={spec.uid}", "--clear-groups", "--",
    ]  # fmt: skip
    return [
        *drop_to_sandbox_uid, *argv, "--info-fd", str(info_fd), "--",
        tools["setpriv"], f"--bounding-set={bounding}", "--",
        tools["python3"], "-I", "-S", "-X", "frozen_modules=on", "-c", _init_source(), *init_args,
    ]  # fmt: skip


def forbid_user_namespaces_argv(tools: dict[str, str], pid1: int) -> list[str]:
    """Set the sandbox user namespace's own limit of nested user namespaces to 0, from the host: no
    nested namespace (as with Docker's default seccomp profile), each of which would hand the sandbox
    a full capability set over new namespaces and so more of the kernel to attack. The sandbox lacks
    CAP_SYS_RESOURCE and cannot raise it again. (bwrap's --disable-userns nests the sandbox one user
    namespace deeper, where slirp4netns can no longer join its network namespace.)"""
    write = "echo 0 > /proc/sys/user/max_user_namespaces"
    return [tools["nsenter"], "-t", str(pid1), "-U", "--", "/bin/sh", "-c", write]


@functools.cache
def _init_source() -> str:
    return resources.files("regatta_executor.local").joinpath("init.py").read_text()


@functools.cache
def _python(host_dirs: tuple[str, ...]) -> str:
    """The host's python3, as long as the sandbox sees it at the same path (through /usr)."""
    found = shutil.which("python3", path=HOST_PATH)
    visible = [Path(d) for d in host_dirs]
    if found is None or not any(Path(found).resolve().is_relative_to(d) for d in visible):
        raise RuntimeError(f"the local environment needs python3 in one of {host_dirs}")
    return found


# Secrets of the host that the read-only host folders would otherwise show. The user namespace already
# keeps them unreadable (their owner is unmapped); the masks keep it so if a file's mode is loosened.
_SECRET_FILES = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers")
_SECRET_GLOBS = ("/etc/ssh/ssh_host_*_key", "/etc/ssl/private/*")


def _masked_files(host_dirs: tuple[str, ...]) -> list[str]:
    visible = [Path(d) for d in host_dirs]
    found = [Path(p) for p in _SECRET_FILES]
    for pattern in _SECRET_GLOBS:
        found += Path("/").glob(pattern.lstrip("/"))
    return [
        str(path)
        for path in found
        if path.is_file() and not path.is_symlink() and any(path.is_relative_to(d) for d in visible)
    ]


@functools.cache
def _real_dirs(paths: tuple[str, ...]) -> tuple[str, ...]:
    """The folders among `paths` that are not symlinks (those are recreated as links in the root)."""
    return tuple(p for p in paths if Path(p).is_dir() and not Path(p).is_symlink())


@functools.cache
def _tool(name: str) -> str:
    path = shutil.which(name, path=HOST_PATH)
    if path is None:
        raise RuntimeError(f"the local environment needs {name!r} on the host (bubblewrap, util-linux)")
    return path
