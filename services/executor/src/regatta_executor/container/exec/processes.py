"""The agent's processes in a container: which are still alive as the verifier starts (evidence under
the `record` policy), and the exec that ends the agent's turn, in the platform's shell (tools.py)."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

import docker

from regatta_executor.container.exec.commands import PlatformCommandError, in_thread, run_blocking
from regatta_executor.container.exec.tools import platform_shell

# Lists, on standard error, every process but those of the spared sessions and its own: the agent's,
# alive as the verifier starts (evidence under the `record` policy, which leaves them running as Harbor
# does). Spared: the container's first session (pid 1, and the image's ENTRYPOINT with what it runs), and
# every session with a process that started before clock tick $1 since boot, i.e. before the container's
# first exec (a service the ENTRYPOINT daemonized); a $1 past the kernel's uptime spares no more. Each
# line: the nonce $2, the pid, then its name and command line with line breaks and NULs as spaces.
# /proc/<pid>/stat is read whole: a line break in a process's name must not cut its fields short.
# (After the name's closing parenthesis: $4 is the session, ${20} the start time in clock ticks.)
LIST_OTHERS = r"""
limit=$1; nonce=$2
read -r up idle < /proc/uptime
[ "$limit" -lt "${up%.*}${up#*.}" ] || limit=0
spared=" 1 $$ "
for d in /proc/[0-9]*; do
  s=$(cat "$d/stat" 2>/dev/null) || continue
  set -- ${s##*) }
  [ "${20}" -lt "$limit" ] && spared="$spared$4 "
done
listed=0
for d in /proc/[0-9]*; do
  s=$(cat "$d/stat" 2>/dev/null) || continue
  set -- ${s##*) }
  case "$spared" in *" $4 "*) continue;; esac
  listed=$((listed + 1))
  [ "$listed" -le 50 ] || continue
  name=$(tr '\n\0' '  ' < "$d/comm" 2>/dev/null)
  line=$(head -c 300 "$d/cmdline" 2>/dev/null | tr '\n\0' '  ')
  echo "$nonce ${d#/proc/} $name	$line" >&2
done
echo "$nonce count $listed" >&2
"""
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def boot_time() -> float:
    """Seconds since this host booted, the clock of /proc/<pid>/stat's start times."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def ticks_before(boot_seconds: float) -> int:
    """The clock tick (of /proc/<pid>/stat) of `boot_seconds`, rounded down, one tick less for the
    rounding of the start times themselves: a process started at or after it has a later tick."""
    return max(0, int(boot_seconds * _CLOCK_TICKS) - 1)


@dataclass(frozen=True)
class AliveProcess:
    pid: int
    name: str
    command: str


def parse_alive(stderr: str, nonce: str) -> tuple[list[AliveProcess], int, str]:
    """The processes LIST_OTHERS printed, their count, and the rest of the standard error."""
    found: list[AliveProcess] = []
    count = 0
    rest = []
    head = nonce + " "
    for line in stderr.splitlines(keepends=True):
        if not line.startswith(head):
            rest.append(line)
            continue
        pid, _, described = line[len(head) :].rstrip("\n").partition(" ")
        if pid == "count":
            count = int(described) if described.isdigit() else count
        elif pid.isdigit():
            name, _, command = described.partition("\t")
            found.append(AliveProcess(int(pid), name.strip()[:64], command.strip()[:300]))
    return found, max(count, len(found)), "".join(rest)


async def end_agent_turn(
    api: docker.APIClient,
    container_id: str,
    then: str,
    *,
    list_alive_before: float | None = None,
    on_stdout: Callable[[bytes], None] | None = None,
    stdin: IO[bytes] | None = None,
) -> tuple[str, list[AliveProcess], int]:
    """Run the shell command `then` (as root, in the platform's shell) once the agent's turn is over;
    returns what it printed (or hands all of its standard output to `on_stdout` as it comes, and
    returns ""), with, given `list_alive_before` (`boot_time()` before the container's first exec),
    the agent's processes still alive first (LIST_OTHERS) and their count. `stdin` (a seekable file) is
    its standard input. (Nothing of the agent's can write into that output: it runs in the platform's
    shell, which no process of the container may open or trace, tools.py.)"""

    def relay(index: int, data: bytes) -> None:
        if index == 0 and on_stdout is not None:
            on_stdout(data)

    nonce = secrets.token_hex(16)
    if list_alive_before is None:
        argv = platform_shell(then)
    else:
        argv = platform_shell(LIST_OTHERS + then, str(ticks_before(list_alive_before)), nonce)
    result = await in_thread(
        run_blocking,
        api,
        container_id,
        argv,
        env={},
        user="0",
        workdir="/",
        max_output_bytes=64 * 1024,
        on_chunk=relay if on_stdout is not None else None,
        stdin=stdin,
    )
    alive, count, stderr = parse_alive(result.stderr, nonce)
    if result.return_code != 0:
        raise PlatformCommandError(
            f"cannot reset the verifier's folders: {stderr.strip()}",
            result.return_code,
        )
    return ("" if on_stdout is not None else result.stdout), alive, count
