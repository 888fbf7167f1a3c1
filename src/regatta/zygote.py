"""`python -m regatta.zygote`: the embedded stack's service launcher. It imports every service once,
then forks one process per service the stack asks for (launcher.py is the stack's side).

Why: a service started as `python -m <module>` spends 1-2.5 s of CPU importing SQLAlchemy, nats-py,
pydantic, FastAPI and Harbor before it does anything; six of them at every start made `regatta up` slow
on a loaded machine. A fork of a process that has imported them all starts a service in milliseconds,
and it is still a process of its own: its own pid and session, environment, log and exit status, and
the same `main()` that `python -m` runs.

Forking is safe here because this process never starts a thread, an event loop, a connection or a
file it would share: it imports, reads requests and reaps children (checked at start). The one file its
children do share is meant to be shared: the data folder's lock the stack passed it (ownership.py).

Protocol, one JSON object per line: the stack writes `{"key", "entry", "env", "log"}`; this process
answers `{"key", "pid"}` (or `{"key", "error"}`), and `{"exited": pid, "code": c}` when a child ends
(a signal as its negative number, as subprocess reports it). At the end of its input it exits; a
child then gets SIGTERM (its parent-death signal), as a service started by the stack does when the
stack dies.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import sys
import threading
import traceback
from typing import Any

from .ownership import die_with_parent
from .services import SERVICES


def _run_child(request: dict[str, Any], keep: set[int], parent: int) -> None:
    """In the forked child of `parent` (this launcher): become the service, never return."""
    code = 1
    try:
        os.setsid()
        die_with_parent(parent)
        signal.set_wakeup_fd(-1)
        for number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
            signal.signal(number, signal.SIG_DFL)
        # As the interpreter sets it at start for `python -m`: a write to a closed socket or pipe (NATS
        # gone mid-write) is an error to handle, not a signal that ends the service.
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        for fd in (*keep, log, null):
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = [request["entry"]]
        importlib.import_module(request["entry"]).main()
        code = 0
    except SystemExit as stop:
        if isinstance(stop.code, int):
            code = stop.code
        elif stop.code is not None:
            print(stop.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _reap(answer: Any) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        # A signal as its negative number, as subprocess reports it.
        answer({"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def main() -> None:
    for service in SERVICES:
        importlib.import_module(service.main_module)
    if threading.active_count() != 1:
        raise SystemExit("regatta.zygote: an import started a thread; a fork would copy it half-way")
    # This process's own death signal was armed by the stack before it ran (launcher.py); a fork's is
    # not inherited, so each child arms its own (_run_child).
    requests, answers = os.dup(0), os.dup(1)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select below through wake_w
    keep = {requests, answers, wake_r, wake_w}
    parent = os.getpid()

    def answer(message: dict[str, Any]) -> None:
        os.write(answers, (json.dumps(message) + "\n").encode())

    pending = b""
    while True:
        readable, _, _ = select.select([requests, wake_r], [], [])
        if wake_r in readable:
            os.read(wake_r, 4096)
        _reap(answer)
        if requests not in readable:
            continue
        data = os.read(requests, 1 << 20)
        if not data:
            return  # the stack closed its end: the children follow through their death signal
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            try:
                pid = os.fork()
            except OSError as error:
                answer({"key": request["key"], "error": str(error)})
                continue
            if pid == 0:
                _run_child(request, keep, parent)
            answer({"key": request["key"], "pid": pid})


if __name__ == "__main__":
    main()
