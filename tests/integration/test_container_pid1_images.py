"""pid 1's execute-only copies (container/pid1.py) are baked into every image an attempt runs, once per
image, so no attempt uploads them: built images are baked before they are tagged, named images get a
baked child, images cached before baking existed are baked on their next use, and a Dockerfile cannot
pass an image without the copies off as baked."""

from __future__ import annotations

import io
import secrets
import tarfile
from pathlib import Path

import docker
import pytest
from regatta_executor.container import pid1
from regatta_executor.container.engine import LABEL_DIGEST, LABEL_MANAGED, LABEL_OWNER
from regatta_executor.container.images import IMAGE_REPOSITORY, ImageCache

from tests.integration.container_support import BASE_IMAGE, LOCAL_IMAGES

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("built_images_removed")]


def copies_in(engine: docker.DockerClient, image_id: str) -> dict[str, int]:
    """The mode of each file under pid 1's folder in `image_id`, read from a created container."""
    container = engine.api.create_container(image_id, entrypoint=["/nonexistent"], network_disabled=True)
    try:
        stream, _ = engine.api.get_archive(container["Id"], pid1.FOLDER)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            return {member.name: member.mode & 0o7777 for member in tar.getmembers()}
    except docker.errors.NotFound:
        return {}
    finally:
        engine.api.remove_container(container["Id"], force=True)


def dockerfile(folder: Path, *lines: str) -> Path:
    folder.mkdir(parents=True)
    body = "\n".join((f"FROM {BASE_IMAGE}", f"RUN echo {secrets.token_hex(8)} > /unique", *lines))
    (folder / "Dockerfile").write_text(body + "\n")
    return folder


def test_a_built_image_holds_the_copies_and_is_baked_once(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    # The Dockerfile claims to be baked already: its label names the base image as its parent.
    base_id = engine.images.get(BASE_IMAGE).id
    folder = dockerfile(tmp_path / "env", f'LABEL {pid1.LABEL_BAKED}="{base_id}"', "USER nobody")
    cache = ImageCache(engine, tmp_path / "state", max_bytes=None, local_images=LOCAL_IMAGES)

    first = cache.built(folder, timeout_sec=120, network_mode="none", log=io.StringIO())
    image = engine.images.get(first.reference)
    assert pid1.baked(image)
    assert copies_in(engine, first.image_id) == {
        ".regatta": 0o711,
        ".regatta/sh": 0o111,
        ".regatta/sleep": 0o111,
    }
    assert first.user == "nobody"  # the task's USER survives the baking
    assert not any(image.labels.get(label) for label in (LABEL_OWNER,))  # no executor's marks on an image

    again = cache.built(folder, timeout_sec=120, network_mode="none", log=io.StringIO())
    assert (again.built, again.image_id) == (False, first.image_id)


def test_an_image_cached_before_baking_is_baked_on_its_next_use(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    folder = dockerfile(tmp_path / "env")
    digest = ImageCache(engine, tmp_path / "state", max_bytes=None, local_images=LOCAL_IMAGES).digest(folder)
    legacy, _ = engine.images.build(
        path=str(folder),
        tag=f"{IMAGE_REPOSITORY}:{digest}",
        labels={LABEL_MANAGED: "1", LABEL_DIGEST: digest},
        rm=True,
        forcerm=True,
    )
    (tmp_path / "state" / "images").mkdir(parents=True)
    (tmp_path / "state" / "images" / f"{digest}.lock").touch()  # so the clean-up finds it
    assert copies_in(engine, str(legacy.id)) == {}

    resolved = ImageCache(engine, tmp_path / "state", max_bytes=None, local_images=LOCAL_IMAGES).built(
        folder, timeout_sec=120, network_mode="none", log=io.StringIO()
    )
    assert not resolved.built  # not built again, only baked
    assert engine.images.get(resolved.image_id).attrs["Parent"] == legacy.id
    assert ".regatta/sh" in copies_in(engine, resolved.image_id)


def test_a_named_image_gets_a_baked_child_once(engine: docker.DockerClient, tmp_path: Path) -> None:
    named = f"regatta-test/named:{secrets.token_hex(6)}"
    image, _ = engine.images.build(
        path=str(dockerfile(tmp_path / "env", "USER nobody")), tag=named, rm=True, forcerm=True
    )
    try:
        cache = ImageCache(engine, tmp_path / "state", max_bytes=None, local_images=[named])
        first = cache.named(named)
        assert first.reference.startswith(f"{IMAGE_REPOSITORY}:pid1-")
        child = engine.images.get(first.image_id)
        assert pid1.baked(child) and child.attrs["Parent"] == image.id
        assert first.user == "nobody"
        assert ".regatta/sleep" in copies_in(engine, first.image_id)
        assert cache.named(named).image_id == first.image_id  # baked once
        engine.images.get(named)  # the task's own image is left as it was
    finally:
        engine.images.remove(named, force=True)
