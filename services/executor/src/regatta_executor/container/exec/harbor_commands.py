"""What the container environment knows of Harbor's calls: the container's log and test folders, which
users Harbor means as root (and how the engine is told), and the trivial commands Harbor runs that the
environment answers without an exec (`chmod +x` of a staged upload, removing stale reward files), and
its run of a test script, after which it reads /logs/verifier back."""

from __future__ import annotations

import posixpath
import re
import shlex
from pathlib import Path, PurePosixPath

from harbor.models.task.config import TaskConfig
from harbor.models.task.verifier_mode import task_has_any_shared_verifier

TESTS = PurePosixPath("/tests")
LOGS = "/logs"
AGENT_LOGS = "/logs/agent"
VERIFIER_LOGS = PurePosixPath("/logs/verifier")
LOG_DIRS = ("/logs/agent", "/logs/verifier", "/logs/artifacts")
# Users Harbor means as root. The engine is always given uid 0 instead of the name: a name makes the
# engine read the image's /etc/passwd from its own view of the container's files, which can be lost
# while the container runs (see `ContainerTransfers._check_engine_view`), and then no exec as "root"
# starts at all.
ROOT_USERS = ("root", "0", 0)


def engine_user(user: str | int | None) -> str:
    if user is None:
        return ""  # the image's USER
    return "0" if user in ROOT_USERS else str(user)


def within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder + "/")


def executable_target(command: str) -> str | None:
    """The path of Harbor's `chmod +x PATH`, else None."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    if len(argv) == 3 and argv[:2] == ["chmod", "+x"] and argv[2].startswith("/"):
        return argv[2]
    return None


def removes_reward_files(command: str) -> bool:
    """Whether `command` is Harbor's `rm -f -- FILE...` of files directly in /logs/verifier."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return False
    if len(argv) < 4 or argv[:3] != ["rm", "-f", "--"]:
        return False
    return all(
        posixpath.normpath(path) == path
        and posixpath.dirname(path) == str(VERIFIER_LOGS)
        and posixpath.basename(path) not in ("", ".", "..")
        for path in argv[3:]
    )


_REDIRECTED = re.compile(r"\((?P<script>[^()]+)\) > (?P<output>\S+) 2>&1")


def runs_test_script(command: str) -> bool:
    """Whether `command` is Harbor's run of a test script with all of its output sent to a file in
    /logs/verifier (`(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1`)."""
    match = _REDIRECTED.fullmatch(command)
    if match is None:
        return False
    try:
        script, output = shlex.split(match["script"]), shlex.split(match["output"])
    except ValueError:
        return False
    return (
        len(script) == 1
        and posixpath.normpath(script[0]) == script[0]
        and within(script[0], str(TESTS))
        and len(output) == 1
        and posixpath.normpath(output[0]) == output[0]
        and posixpath.dirname(output[0]) == str(VERIFIER_LOGS)
    )


# Harbor names a separate verifier's environment after its trial with this in the middle
# (harbor.trial.trial.Trial._separate_verifier_session_id).
SEPARATE_VERIFIER_SESSION = "__verifier__"


def has_shared_verifier(environment_dir: Path) -> bool:
    """Whether a verifier of the task (in any step) runs where the agent ran. The task's own task.toml,
    which the executor loaded and checked already; unreadable, the answer is the safe one (yes)."""
    try:
        config = TaskConfig.model_validate_toml((environment_dir.parent / "task.toml").read_text())
    except (OSError, ValueError):
        return True
    return task_has_any_shared_verifier(config)
