"""The container's pid 1 and the platform's tools (container/exec/pid1.py, tools.py) on a real engine: the
tools folder is host root's execute-only static busybox, made and repaired by the executor; pid 1 runs
from it in any image, even one without a shell; the image's ENTRYPOINT is started with its argv intact
and its own program (not busybox's applet of that name); a named image is used as it is, and an image an
older executor baked pid 1 into is built again."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import docker
import pytest
from regatta_executor.container.engine import LABEL_DIGEST, LABEL_MANAGED
from regatta_executor.container.exec import tools
from regatta_executor.container.image.task_images import (
    IMAGE_REPOSITORY,
    LABEL_LEGACY_BAKED,
    ImageCache,
)

from tests.integration.container_support import BASE_IMAGE, LOCAL_IMAGES, started_environment, write_task

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("built_images_removed")]


def modes(folder: Path) -> dict[str, tuple[int, int, int]]:
    """name -> (mode, owner uid, inode) of the folder itself ("") and of each file in it."""
    found = {"": (stat.S_IMODE(folder.stat().st_mode), folder.stat().st_uid, 0)}
    for path in folder.iterdir():
        info = path.lstat()
        found[path.name] = (stat.S_IMODE(info.st_mode), info.st_uid, info.st_ino)
    return found


def test_the_tools_folder_is_host_roots_execute_only_busybox_and_is_repaired(tmp_path: Path) -> None:
    folder = tools.prepared(tmp_path / "tools")
    made = modes(folder)
    assert sorted(made) == ["", "busybox", "sh", "sleep"]  # no temporary file left
    assert made[""][:2] == (0o711, 0)
    inodes = {made[name][2] for name in tools.NAMES}
    assert len(inodes) == 1  # one program under three names
    assert all(made[name][:2] == (0o111, 0) for name in tools.NAMES)
    assert (folder / "sh").read_bytes() == tools.SOURCE.read_bytes()

    # Another process (the cache is per process) finds a changed mode and a foreign file and repairs.
    os.chmod(folder / "sleep", 0o755)
    (folder / "sh").unlink()
    (folder / "sh").write_bytes(b"\x7fELF not busybox")
    os.chmod(folder, 0o777)
    tools._ready.clear()
    tools.prepared(folder)
    repaired = modes(folder)
    assert repaired[""][:2] == (0o711, 0)
    assert all(repaired[name][:2] == (0o111, 0) for name in tools.NAMES)
    assert (folder / "sh").read_bytes() == tools.SOURCE.read_bytes()


def test_a_dynamically_linked_program_is_refused_as_the_platform_busybox(tmp_path: Path) -> None:
    ls = shutil.which("ls")
    assert ls
    with pytest.raises(tools.ToolsError, match="dynamically linked"):
        tools.prepared(tmp_path / "tools", source=Path(ls))
    with pytest.raises(tools.ToolsError, match="not an executable program"):
        (tmp_path / "script").write_text("#!/bin/sh\n")
        tools.prepared(tmp_path / "tools", source=tmp_path / "script")
    assert not (tmp_path / "tools").exists()


def test_a_named_image_is_used_as_it_is(engine: docker.DockerClient, tmp_path: Path) -> None:
    named = f"regatta-test/named:{secrets.token_hex(6)}"
    folder = tmp_path / "env"
    folder.mkdir()
    (folder / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\nRUN echo {secrets.token_hex(8)} > /unique\nWORKDIR /srv\nUSER nobody\n"
        'ENTRYPOINT ["/bin/echo", "a b"]\n'
    )
    image, _ = engine.images.build(path=str(folder), tag=named, rm=True, forcerm=True)
    try:
        resolved = ImageCache(engine, tmp_path / "state", max_bytes=None, local_images=[named]).named(named)
        assert (resolved.reference, resolved.image_id) == (named, image.id)
        assert (resolved.user, resolved.workdir, resolved.entrypoint) == (
            "nobody",
            "/srv",
            ("/bin/echo", "a b"),
        )
        # No child image made: none of the platform's images is built on this one. (The plain
        # listing: other workers prune the platform's images meanwhile.)
        children = [i["Id"] for i in engine.api.images(IMAGE_REPOSITORY) if i.get("ParentId") == image.id]
        assert children == []
    finally:
        engine.images.remove(named, force=True)


async def test_pid1_and_the_platform_shell_run_in_an_image_without_a_shell(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    task = write_task(
        tmp_path / "tasks",
        "scratch",
        dockerfile=f"FROM scratch\nCOPY marker /marker-{secrets.token_hex(4)}\n",
    )
    (task / "environment" / "marker").write_text("here\n")
    async with started_environment(tmp_path, task) as env:
        container = engine.containers.get(env.container_name)
        assert container.status == "running"
        ran = container.exec_run(
            tools.platform_shell('cat /marker-*; echo "$1"; ls /bin 2>/dev/null || echo no-bin', "argument")
        )
        assert ran.exit_code == 0, ran.output
        assert ran.output.decode().splitlines() == ["here", "argument", "no-bin"]  # no image programs


HOSTILE_ARGS = [
    "a b",
    "it's",
    'say "hi"',
    "$(touch /tmp/spliced)",
    "`touch /tmp/spliced`",
    "new\nline",
    "-x",
    "",
]
# Named like a busybox applet: a shell preferring applets would run busybox's ls instead.
FAKE_LS = """#!/bin/bash
printf '%s\\0' "$0" "$@" > /tmp/argv
pwd > /tmp/cwd
exec "${@: -3}"
"""


async def test_the_entrypoint_gets_its_argv_intact_and_runs_the_images_own_program(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    task = write_task(
        tmp_path / "tasks",
        "entrypoint-argv",
        dockerfile=f"""
            FROM {BASE_IMAGE}
            COPY ls /usr/local/bin/ls
            RUN chmod 755 /usr/local/bin/ls && echo {secrets.token_hex(4)} > /unique
            WORKDIR /srv/image
            ENTRYPOINT {json.dumps(["ls", *HOSTILE_ARGS])}
        """,
        environment='workdir = "/srv/task"\n',
    )
    (task / "environment" / "ls").write_text(FAKE_LS)
    async with started_environment(tmp_path, task) as env:
        for _ in range(100):
            argv = await env.exec("base64 -w0 /tmp/argv 2>/dev/null")
            if argv.stdout:
                break
            await asyncio.sleep(0.05)
        recorded = [part.decode() for part in base64.b64decode(argv.stdout or "").split(b"\0")[:-1]]
        assert recorded == ["/usr/local/bin/ls", *HOSTILE_ARGS, "sh", "-c", "sleep infinity"]
        assert (await env.exec("cat /tmp/cwd")).stdout == "/srv/image\n"  # the image's WORKDIR
        assert (await env.exec("pwd")).stdout == "/srv/task\n"  # commands: the task's
        spliced = await env.exec("test -e /tmp/spliced")
        assert spliced.return_code != 0, spliced
        survivors = " ".join(((await env.exec("ps -eo sid,args")).stdout or "").split())
        assert "1 sleep infinity" in survivors, survivors  # Harbor's command, in pid 1's session


def test_an_image_baked_by_an_older_executor_is_built_again(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """Older executors cached a child of each built image with their pid 1 committed as its ENTRYPOINT
    (the Dockerfile's lost): such a cached image must not be taken for the task's."""
    folder = tmp_path / "env"
    folder.mkdir()
    (folder / "Dockerfile").write_text(
        f'FROM {BASE_IMAGE}\nRUN echo {secrets.token_hex(8)} > /unique\nENTRYPOINT ["/bin/echo", "own"]\n'
    )
    cache = ImageCache(engine, tmp_path / "state", max_bytes=None, local_images=LOCAL_IMAGES)
    digest = cache.digest(folder)
    original, _ = engine.images.build(
        path=str(folder), labels={LABEL_MANAGED: "1", LABEL_DIGEST: digest}, rm=True, forcerm=True
    )
    legacy = engine.api.create_container(original.id, entrypoint=["/.regatta/sh", "-c", "old pid 1"])
    try:
        committed = engine.api.commit(
            legacy["Id"], changes=[f'LABEL {LABEL_LEGACY_BAKED}="{original.id}"'], pause=False
        )
    finally:
        engine.api.remove_container(legacy["Id"], force=True)
    engine.images.get(committed["Id"]).tag(IMAGE_REPOSITORY, digest)
    (tmp_path / "state" / "images").mkdir(parents=True)
    (tmp_path / "state" / "images" / f"{digest}.lock").touch()  # so the clean-up finds it

    resolved = cache.built(folder, timeout_sec=120, network_mode="none", log=io.StringIO())
    assert resolved.built and resolved.entrypoint == ("/bin/echo", "own")
    assert LABEL_LEGACY_BAKED not in (engine.images.get(resolved.reference).labels or {})
    with contextlib.suppress(docker.errors.APIError):
        engine.images.remove(committed["Id"], force=True)


CHECK_AS_NOBODY = """
import os, sys
from pathlib import Path
from regatta_executor.container.exec import tools
source = tools.SOURCE.read_bytes()  # read as root: the executor's own install, not the check
tools._static_program = lambda path: source
os.setgroups([]); os.setgid(65534); os.setuid(65534)
try:
    tools.prepared(Path(sys.argv[1]))
    print("accepted")
except tools.ToolsError as exc:
    print("refused:", exc)
"""


def test_an_executor_that_is_not_root_only_checks_the_folder() -> None:
    """It cannot make files that are out of the container's reach everywhere (under a rootless engine
    its own files are the container root's), so it takes only a folder root made, and repairs none."""
    reachable = Path(tempfile.mkdtemp(prefix="regatta-test-tools-"))  # tmp_path's parents are root's only
    reachable.chmod(0o755)
    try:
        _checks_only(tools.prepared(reachable / "tools"))
    finally:
        shutil.rmtree(reachable)


def _checks_only(folder: Path) -> None:
    def as_nobody() -> str:
        run = subprocess.run(
            [sys.executable, "-c", CHECK_AS_NOBODY, str(folder)], capture_output=True, text=True
        )
        assert run.returncode == 0, run.stderr
        return run.stdout.strip()

    assert as_nobody() == "accepted"
    os.chmod(folder / "sleep", 0o755)
    assert as_nobody().startswith("refused:")
    assert stat.S_IMODE((folder / "sleep").stat().st_mode) == 0o755  # left as it was
    os.chmod(folder / "sleep", 0o111)
    os.chown(folder, 65534, 65534)
    assert as_nobody().startswith("refused:")


@pytest.mark.parametrize("entrypoint", ["", 'ENTRYPOINT ["sh", "-c", "exec \\"$@\\"", "start"]'])
async def test_pid1_reaps_orphans(engine: docker.DockerClient, tmp_path: Path, entrypoint: str) -> None:
    """Docker's init is not used: pid 1 must reap what the agent's commands orphan, or zombies pile up
    against the process limit."""
    dockerfile = f"FROM {BASE_IMAGE}\nRUN echo {secrets.token_hex(4)} > /unique\n{entrypoint}\n"
    async with started_environment(
        tmp_path, write_task(tmp_path / "tasks", "orphans", dockerfile=dockerfile)
    ) as env:
        orphaned = await env.exec("for i in $(seq 20); do (sleep 0.1 &) ; done; echo made")
        assert orphaned.stdout == "made\n"
        zombies = ""
        for _ in range(50):
            await asyncio.sleep(0.1)
            zombies = (await env.exec("ps -eo stat,pid,ppid,args | awk '$1 ~ /^Z/'")).stdout or ""
            if not zombies and "sleep 0.1" not in ((await env.exec("ps -eo args")).stdout or ""):
                break
        assert zombies == ""
