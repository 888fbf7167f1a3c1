"""The sandbox's pid 1: starts commands on the executor's behalf, like dockerd does for `docker exec`.

This file is not imported by the executor: its source runs inside the sandbox as
`python3 -I -S -c <source> <control fd> <ready fd> <info fd> <cgroup procs fds…>`, with the host's python3.
Entering the sandbox from outside costs a chain of processes per command (a cgroup join, nsenter, setpriv,
env, then bash); started from here a command costs one posix_spawn of bash (a fork where rlimits apply).
It therefore imports only C modules (no enum, no json, no socket.py) to start in a few milliseconds.

Protocol, one SOCK_SEQPACKET message each, fields separated by NUL:
  executor -> here: run <id> <cwd> <command> <NAME=value>…   with SCM_RIGHTS [stdout, stderr]
                    runfd <id>                               with [stdout, stderr, payload memfd]
                    kill <id>
                    killall <id>    kill every process of the sandbox but this one, then answer exit
  here -> executor: exit <id> <return code>   (128 + signal number if killed by a signal)
                    fail <id> <message>       (the command could not be started, e.g. at the pid limit)
Everything this process knows about is what the executor sent, so nothing inside the sandbox can make it
touch host files: it holds no host fd but the output files of commands it runs.
"""

import _signal
import _socket
import os
import resource
import select

SCM_RIGHTS = 1
_MAX_MESSAGE = 1 << 17
_DEFAULT_IN_COMMANDS = (_signal.SIGPIPE, _signal.SIGXFSZ, _signal.SIGCHLD, _signal.SIGINT)


class _CannotChdir(Exception):
    pass


def _cannot_chdir(cwd, reason):
    # The host's python3 runs this file: no 3.12-only syntax here (such as nested f-string quotes).
    path = cwd.decode(errors="replace")
    return f"cannot change directory to {path!r}: {reason}\n".encode()


def _join_cgroups(procs_fds):
    for fd in procs_fds:
        # "0" moves the writer; everything forked from here on is in the sandbox's cgroups.
        os.write(fd, b"0")
        os.close(fd)


def _child(cwd, command, env, out_fd, err_fd, rlimits):
    try:
        os.setsid()
        # Applied per command rather than to pid 1, which must keep running whatever the limits.
        for name, value in rlimits:
            resource.setrlimit(name, (value, value))
        for sig in _DEFAULT_IN_COMMANDS:
            _signal.signal(sig, _signal.SIG_DFL)
        _signal.set_wakeup_fd(-1)
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        try:
            # pid 1 is exempt from the OOM killer (set by the executor); its commands must not be.
            with open("/proc/self/oom_score_adj", "w") as adj:
                adj.write("0")
        except OSError:
            pass
        try:
            os.chdir(cwd)
        except OSError as exc:
            os.write(2, _cannot_chdir(cwd, exc.strerror))
            os._exit(125)
        os.execve("/bin/bash", ["bash", "-c", command], env)
    except BaseException as exc:  # a forked child must never return into the loop
        try:
            os.write(2, f"cannot run the command: {exc}\n".encode())
        finally:
            os._exit(127)


class Init:
    def __init__(self, control_fd, rlimits):
        self.rlimits = rlimits
        self.sock = _socket.socket(fileno=control_fd)
        os.set_inheritable(control_fd, False)
        self.commands = {}  # pid -> command id
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        os.set_blocking(wake_r, False)
        self.wake_r = wake_r
        _signal.set_wakeup_fd(wake_w)
        # A Python-level handler, so that SIGCHLD wakes the loop through the wakeup fd. pid 1 gets no
        # other signal from inside its namespace (the kernel drops those without a handler).
        _signal.signal(_signal.SIGCHLD, lambda signum, frame: None)
        _signal.signal(_signal.SIGINT, _signal.SIG_DFL)

    def send(self, *fields):
        self.sock.sendmsg([b"\0".join(str(f).encode() if not isinstance(f, bytes) else f for f in fields)])

    def serve(self):
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        poller.register(self.wake_r, select.POLLIN)
        while True:
            for fd, _ in poller.poll():
                if fd == self.wake_r:
                    try:
                        while os.read(self.wake_r, 512):
                            pass
                    except BlockingIOError:
                        pass
                    self.reap()
                elif not self.receive():
                    return  # the executor is gone: exiting kills every process in the sandbox

    def receive(self):
        data, ancillary, _, _ = self.sock.recvmsg(_MAX_MESSAGE, _socket.CMSG_SPACE(4 * 8))
        fds = []
        for level, kind, payload in ancillary:
            if level == _socket.SOL_SOCKET and kind == SCM_RIGHTS:
                usable = len(payload) - len(payload) % 4
                fds += [int.from_bytes(payload[i : i + 4], "little") for i in range(0, usable, 4)]
        for fd in fds:
            os.set_inheritable(fd, False)
        if not data:
            return False
        try:
            self.handle(data.split(b"\0"), fds)
        finally:
            for fd in fds:
                os.close(fd)
        return True

    def handle(self, fields, fds):
        verb = fields[0]
        if verb == b"killall":
            self.kill_all()
            self.send(b"exit", fields[1], 0)
            return
        if verb == b"kill":
            for pid, command_id in self.commands.items():
                if command_id == fields[1]:
                    try:
                        os.killpg(pid, _signal.SIGKILL)
                    except ProcessLookupError:
                        continue
            return
        if verb == b"runfd":
            with os.fdopen(os.dup(fds[2]), "rb") as payload:
                fields = [b"run", fields[1], *payload.read().split(b"\0")]
        command_id, cwd, command = fields[1], fields[2], fields[3]
        env = dict(item.split(b"=", 1) for item in fields[4:] if b"=" in item)
        try:
            pid = os.fork() if self.rlimits else self.spawn(cwd, command, env, fds[0], fds[1])
        except _CannotChdir as exc:
            os.write(fds[1], _cannot_chdir(cwd, exc.args[0]))
            self.send(b"exit", command_id, 125)
            return
        except OSError as exc:
            self.send(b"fail", command_id, exc.strerror or str(exc))
            return
        if pid == 0:
            _child(cwd, command, env, fds[0], fds[1], self.rlimits)
        self.commands[pid] = command_id

    def spawn(self, cwd, command, env, out_fd, err_fd):
        """posix_spawn (vfork and exec: no copy of this process's page tables, no Python in the child),
        for commands without per-command rlimits (those need the forked child of _child). This process
        is single-threaded, so changing its own directory for the child to inherit races with nothing."""
        try:
            os.chdir(cwd)
        except OSError as exc:
            raise _CannotChdir(exc.strerror) from None
        try:
            pid = os.posix_spawn(
                "/bin/bash",
                ["bash", "-c", command],
                env,
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, out_fd, 1),
                    (os.POSIX_SPAWN_DUP2, err_fd, 2),
                ],
                setsid=True,
                setsigdef=_DEFAULT_IN_COMMANDS,
            )
        finally:
            os.chdir("/")
        # pid 1 is exempt from the OOM killer (set by the executor); its commands must not be. The
        # child inherited -1000 and runs bash's start-up before this write lands: microseconds.
        try:
            with open(f"/proc/{pid}/oom_score_adj", "w") as adj:
                adj.write("0")
        except OSError:
            pass
        return pid

    def kill_all(self):
        """kill(-1) from a pid namespace's init reaches every other process of the namespace, whatever
        its session or process group. Repeated until none is left: a process forking while the signal
        is delivered, or a zombie not yet reparented here, keeps the round going."""
        poller = select.poll()
        while True:
            self.reap()
            try:
                os.kill(-1, _signal.SIGKILL)
            except ProcessLookupError:
                return
            poller.poll(5)

    def reap(self):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            command_id = self.commands.pop(pid, None)
            if command_id is not None:
                code = os.waitstatus_to_exitcode(status)
                self.send(b"exit", command_id, 128 - code if code < 0 else code)


def _not_dumpable():
    """Every process of the sandbox has pid 1's uid, so without this any of them could ptrace pid 1
    (no Yama on every host) and make it skip the kill before the verifier, or read the verifier's
    secrets from its memory. Non-dumpable, it needs CAP_SYS_PTRACE, which the sandbox lacks.
    _ctypes, not ctypes: a C module, at a fraction of ctypes' import time."""
    import _ctypes

    prctl = _ctypes.dlsym(_ctypes.dlopen(None, 2), "prctl")
    pr_set_dumpable = 4
    if _ctypes.call_function(prctl, (pr_set_dumpable, 0, 0, 0, 0)) != 0:
        raise OSError("prctl(PR_SET_DUMPABLE, 0) failed")


def _open_fds():
    return {int(name) for name in os.listdir("/proc/self/fd")}


def main(argv):
    _not_dumpable()
    control_fd, ready_fd, info_fd = (int(v) for v in argv[1:4])
    procs_fds, rlimits = [], []
    for arg in argv[4:]:
        key, _, value = arg.partition("=")
        if key == "cgroup":
            procs_fds.append(int(value))
        else:
            rlimits.append((getattr(resource, key), int(value)))
    _join_cgroups(procs_fds)
    init = Init(control_fd, rlimits)
    os.write(ready_fd, b"ready\n")
    os.close(ready_fd)
    if info_fd in _open_fds():  # bwrap closes the info fd itself once it has written to it
        os.close(info_fd)
    init.serve()


if __name__ == "__main__":
    import sys

    main(sys.argv)
