"""Files in and out of the `container` environment on a real Docker engine (container/files/transfers.py,
files.py): uploads and downloads with their cap, what is answered from one archive without an exec, and
the agent's logs Harbor sends back."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from tests.integration.container_support import started_environment

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("built_images_removed")]


async def test_files_in_and_out_and_the_download_cap(engine: docker.DockerClient, tmp_path: Path) -> None:
    source = tmp_path / "upload"
    (source / "nested").mkdir(parents=True)
    (source / "nested" / "a.txt").write_text("A")
    (source / "b.txt").write_text("B")
    async with started_environment(tmp_path, max_download_mb=1) as env:
        await env.upload_dir(source, "/deep/new/dir")
        await env.upload_file(source / "b.txt", "/other/place/c.txt")
        listing = await env.exec("cat /deep/new/dir/nested/a.txt /deep/new/dir/b.txt /other/place/c.txt")
        assert listing.stdout == "ABB"
        assert (await env.exec("stat -c %a /tmp")).stdout == "1777\n"

        await env.exec("mkdir -p /out/sub && echo x > /out/sub/x && ln -s /etc/shadow /out/link")
        await env.download_dir("/out", tmp_path / "down")
        assert (tmp_path / "down" / "sub" / "x").read_text() == "x\n"
        assert not (tmp_path / "down" / "link").exists() or (tmp_path / "down" / "link").is_symlink()

        await env.exec("head -c 3000000 /dev/zero > /out/big")
        with pytest.raises(RuntimeError, match="bring back"):
            await env.download_file("/out/big", tmp_path / "big")


async def test_what_is_answered_without_an_exec_is_what_the_command_would_do(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """`chmod +x` of a file still waiting to be uploaded, `test -d` and reads from one archive of a folder:
    the same results as the commands and separate reads would give."""
    source = tmp_path / "scripts"
    source.mkdir()
    (source / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (source / "run.sh").chmod(0o644)
    (tmp_path / "empty").mkdir()
    async with started_environment(tmp_path) as env:
        await env.upload_dir(source, "/opt/scripts")
        assert (await env.exec("chmod +x /opt/scripts/run.sh", user="root")).return_code == 0
        ran = await env.exec("stat -c %a /opt/scripts/run.sh && /opt/scripts/run.sh")
        assert ran.stdout == "755\nran\n", ran
        assert (await env.exec("chmod +x /opt/scripts/absent.sh", user="root")).return_code != 0

        await env.upload_dir(tmp_path / "empty", "/made/empty")
        assert await env.is_dir("/made/empty", user="root") is True

        await env.exec(
            "mkdir -p /logs/artifacts/sub && echo a > /logs/artifacts/sub/a && echo x > /logs/agent/x.txt"
            " && ln -s /etc /logs/artifacts/link"
        )
        await env.download_file("/logs/agent/x.txt", tmp_path / "x.txt")
        await env.download_dir("/logs/agent", tmp_path / "agent")
        assert await env.is_dir("/logs/artifacts", user="root") is True
        await env.download_dir("/logs/artifacts", tmp_path / "artifacts")
        assert (tmp_path / "x.txt").read_text() == (tmp_path / "agent" / "x.txt").read_text() == "x\n"
        assert (tmp_path / "artifacts" / "sub" / "a").read_text() == "a\n"
        assert await env.is_dir("/logs/agent/x.txt", user="root") is False
        assert await env.is_dir("/logs/nothing", user="root") is False
        assert await env.is_dir("/logs/artifacts/link", user="root") is True  # `test -d` follows links


async def test_logs_sent_back_unchanged_are_not_uploaded_and_changed_ones_are(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """Harbor reads the agent's logs back and uploads the host's copy again. Unchanged, the container
    keeps the agent's own files (as where the logs are mounted); changed on the host, or written into
    meanwhile by an upload, the copy goes back."""
    async with started_environment(tmp_path) as env:
        await env.exec("echo agent > /logs/agent/a.txt", user="root")
        await env.download_dir("/logs/agent", tmp_path / "agent")
        await env.exec("echo later > /logs/agent/a.txt", user="root")
        await env.upload_dir(tmp_path / "agent", "/logs/agent")
        kept = await env.exec("cat /logs/agent/a.txt", user="root")
        assert kept.stdout == "later\n", kept  # not sent back: the container's own file stays

        (tmp_path / "agent" / "b.txt").write_text("added on the host\n")
        await env.upload_dir(tmp_path / "agent", "/logs/agent")
        sent = await env.exec("cat /logs/agent/a.txt /logs/agent/b.txt", user="root")
        assert sent.stdout == "agent\nadded on the host\n", sent

        await env.download_dir("/logs/agent", tmp_path / "again")
        extra = tmp_path / "extra.txt"
        extra.write_text("uploaded\n")
        await env.upload_file(extra, "/logs/agent/a.txt")
        await env.upload_dir(tmp_path / "again", "/logs/agent")
        assert (await env.exec("cat /logs/agent/a.txt", user="root")).stdout == "agent\n"
