"""The container's pid 1: the one process the platform keeps across the kill before the verifier, closed
to the agent, and the starter of the image's own ENTRYPOINT as Harbor's docker environment runs it.

pid 1 is the platform's busybox sh from the read-only tools mount (tools.py), so it is not dumpable: the
agent, even as the container's root, can neither ptrace it nor write its memory. It runs as the image's
USER (no user override: root execs then get Docker's default capabilities, as under Harbor), traps TERM
(so the engine stops the container at once) and waits on its children in a loop, which reaps every
orphan (Docker's init is not used). Its `sleep` children are the tools mount's too, closed the same way.

Where the image has an ENTRYPOINT, pid 1 first starts it in the background with Harbor's command
appended (`ENTRYPOINT... sh -c "sleep infinity"`: the image's CMD is replaced, as Harbor does), with the
container's environment (the image's ENV), its USER, and the image's WORKDIR as its working directory.
It stays in pid 1's session, so the kill before the verifier (which spares session 1) leaves the task's
own services running. Its argv is passed as positional arguments, never spliced into the script, and its
program is found on PATH by the script itself: busybox would otherwise run its own applet of that name
(`sh`, `sleep`, ...) instead of the image's program. The task's processes are the image's: the agent can
reach them as it could under Harbor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from regatta_executor.container.exec.tools import SHELL, SLEEP

# Harbor's docker environment runs this as the container's command.
HARBOR_COMMAND = ("sh", "-c", "sleep infinity")
KEEPALIVE = f"trap 'exit 0' TERM; while :; do {SLEEP} 3600 & wait; done"
# $1: the working directory of the ENTRYPOINT ("" keeps pid 1's); then its argv.
_START_ENTRYPOINT = r"""
trap 'exit 0' TERM
(
  set -f
  [ -z "$1" ] || cd "$1" || exit 126
  shift
  name=$1; shift; program=
  case $name in
    */*) program=$name ;;
    *) IFS=:
       for dir in ${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}; do
         if [ -f "${dir:-.}/$name" ] && [ -x "${dir:-.}/$name" ]; then program=${dir:-.}/$name; break; fi
       done
       unset IFS ;;
  esac
  [ -n "$program" ] || { echo "regatta pid 1: ENTRYPOINT $name not found on PATH" >&2; exit 127; }
  exec -a "$name" "$program" "$@"
) </dev/null &
"""


def entrypoint(image_entrypoint: Sequence[str], workdir: str | None) -> list[str]:
    """pid 1's argv. `workdir`: where the ENTRYPOINT starts when the container's own working directory
    is another (the task's), else None."""
    if not image_entrypoint:
        return [SHELL, "-c", KEEPALIVE]
    script = _START_ENTRYPOINT + KEEPALIVE
    return [SHELL, "-c", script, "regatta-pid1", workdir or "", *image_entrypoint, *HARBOR_COMMAND]


def container_config(image_entrypoint: Sequence[str], workdir: str | None) -> dict[str, Any]:
    """What the container is created with for this pid 1 (instead of Docker's init and the image's
    ENTRYPOINT and CMD)."""
    return {"entrypoint": entrypoint(image_entrypoint, workdir), "init": False}
