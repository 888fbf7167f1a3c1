"""The images boundary of the `container` environment on a real engine, each attack as a task author in
another workspace would write it: engine-side fetches from the host's network (ADD of a loopback URL, a
loopback registry), another workspace's image (an id prefix, `regatta-env:<digest>`, FROM or COPY --from
it), a cache keyed on less than the build context sent, and failed builds repeated within a run."""

from __future__ import annotations

import io
import secrets
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import docker
import pytest
from regatta_executor.attempt.artifacts import collect
from regatta_executor.container.engine import LABEL_DIGEST
from regatta_executor.container.image.task_images import IMAGE_REPOSITORY, ImageBuildError, ImageCache
from regatta_shared.rules.task_defects import TASK_DEFECT

from tests.integration.container_support import (
    BASE_IMAGE,
    LOCAL_IMAGES,
    build_log,
    containers_of,
    exception_type,
    rewards,
    run_trial,
    trial_dir,
    write_task,
)

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("built_images_removed")]


class Listener:
    """A host-only HTTP service on 127.0.0.1 that answers a nonce and counts every request it gets."""

    def __init__(self) -> None:
        self.body = f"host-only-{secrets.token_hex(12)}"
        self.requests = 0
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                listener.requests += 1
                data = listener.body.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_HEAD = do_GET

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    served = Listener()
    yield served
    served.close()


def artifacts_hold(work: Path, text: str) -> bool:
    """Whether any file the attempts under `work` left (trial folders, their downloads) holds `text`."""
    needle = text.encode()
    if any(
        needle in path.read_bytes() for path in work.rglob("*") if path.is_file() and not path.is_symlink()
    ):
        return True
    return any(
        needle in data
        for folder in (work / "trials").glob("*")
        if folder.is_dir()
        for _, data in collect(folder)
    )


async def test_no_network_task_cannot_add_from_a_host_only_listener(
    engine: docker.DockerClient, tmp_path: Path, listener: Listener
) -> None:
    nonce = secrets.token_hex(8)
    url = f"http://127.0.0.1:{listener.port}/{nonce}"
    direct = write_task(tmp_path / "tasks", "add-direct", dockerfile=f"FROM {BASE_IMAGE}\nADD {url} /x\n")
    # The same fetch hidden behind an ARG default, as the builder would expand it.
    hidden = write_task(
        tmp_path / "tasks",
        "add-arg",
        dockerfile=f"FROM {BASE_IMAGE}\nRUN true\nARG HOST=127.0.0.1:{listener.port}\n"
        f"ADD http://${{HOST}}/{nonce} /x\n",
    )
    for task, line in ((direct, 2), (hidden, 4)):
        result = await run_trial(task, "oracle", tmp_path)
        assert exception_type(result) == "DockerfileRefusedError"
        message = result.exception_info.exception_message or ""
        assert f"environment/Dockerfile line {line}: ADD" in message and "address not allowed" in message
        assert containers_of(engine, result.trial_name) == []
    assert listener.requests == 0
    assert not artifacts_hold(tmp_path, listener.body)


async def test_an_operator_allowed_internal_source_is_fetched(
    engine: docker.DockerClient, tmp_path: Path, listener: Listener
) -> None:
    """The counterpart of the refusal: with REGATTA_OUTBOUND_ALLOW naming it, the engine fetches it (so
    the listener above would have seen the refused fetch, had it happened)."""
    url = f"http://127.0.0.1:{listener.port}/{secrets.token_hex(8)}"
    task = write_task(
        tmp_path / "tasks",
        "add-allowed",
        solve="cat /fetched > /logs/agent/fetched.txt",
        dockerfile=f"FROM {BASE_IMAGE}\nADD {url} /fetched\nRUN chmod 644 /fetched\n",
    )
    result = await run_trial(task, "oracle", tmp_path, outbound_allow=f"127.0.0.1:{listener.port}")
    assert exception_type(result) is None, result.exception_info
    assert listener.requests >= 1
    assert (trial_dir(tmp_path, result) / "agent" / "fetched.txt").read_text() == listener.body


class Redirector:
    """An HTTP service on 127.0.0.1 that answers every request with a 302 to `target`, counting them."""

    def __init__(self, target: str) -> None:
        self.requests = 0
        redirector = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                redirector.requests += 1
                self.send_response(302)
                self.send_header("Location", target)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_HEAD = do_GET

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_an_allowed_add_source_cannot_redirect_the_fetch_to_a_host_only_listener(
    engine: docker.DockerClient, tmp_path: Path, listener: Listener
) -> None:
    """The operator allows one internal source; it answers 302 to a host-only listener. The engine
    would follow that redirect from the host's network; the executor fetches instead, every hop checked."""
    nonce = secrets.token_hex(8)
    redirector = Redirector(f"http://127.0.0.1:{listener.port}/{nonce}")
    try:
        url = f"http://127.0.0.1:{redirector.port}/{nonce}"
        task = write_task(
            tmp_path / "tasks",
            "add-redirected",
            solve="cat /fetched > /logs/agent/fetched.txt",
            dockerfile=f"FROM {BASE_IMAGE}\nADD {url} /fetched\nRUN chmod 644 /fetched\n",
        )
        refused = await run_trial(task, "oracle", tmp_path, outbound_allow=f"127.0.0.1:{redirector.port}")
        assert exception_type(refused) == "DockerfileRefusedError"
        message = refused.exception_info.exception_message or ""
        refusal = "refused (address not allowed unless REGATTA_OUTBOUND_ALLOW names it)"
        assert f"environment/Dockerfile line 2: ADD '{url}' {refusal}" in message
        assert redirector.requests >= 1 and listener.requests == 0
        assert containers_of(engine, refused.trial_name) == []
        assert not artifacts_hold(tmp_path, listener.body)

        # The counter-check: with both allowed, the redirect is followed and the file is the listener's.
        both = f"127.0.0.1:{redirector.port},127.0.0.1:{listener.port}"
        fetched = await run_trial(task, "oracle", tmp_path, outbound_allow=both)
        assert exception_type(fetched) is None, fetched.exception_info
        assert (trial_dir(tmp_path, fetched) / "agent" / "fetched.txt").read_text() == listener.body
    finally:
        redirector.close()


async def test_a_registry_on_the_hosts_loopback_is_never_contacted(
    engine: docker.DockerClient, tmp_path: Path, listener: Listener
) -> None:
    reference = f"127.0.0.1:{listener.port}/x"
    task = write_task(tmp_path / "tasks", "loopback-registry", environment=f'docker_image = "{reference}"\n')
    (task / "environment" / "Dockerfile").unlink()
    result = await run_trial(task, "oracle", tmp_path)
    assert exception_type(result) == "ImageRefusedError"
    message = result.exception_info.exception_message or ""
    assert reference in message and "address not allowed" in message
    assert listener.requests == 0
    assert listener.body not in message
    assert not artifacts_hold(tmp_path, listener.body)


async def test_another_workspaces_built_image_cannot_be_named(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    # Workspace A's task: its image holds a hidden file.
    hidden = f"hidden-{secrets.token_hex(12)}"
    a = write_task(
        tmp_path / "a",
        "a",
        dockerfile=f"FROM {BASE_IMAGE}\nRUN echo {hidden} > /hidden && chmod 600 /hidden\nWORKDIR /app\n",
    )
    first = await run_trial(a, "nop", tmp_path / "run-a")
    assert exception_type(first) is None, first.exception_info
    built_line = next(
        line for line in build_log(tmp_path / "run-a", first).splitlines() if line.startswith("built ")
    )
    a_reference = built_line.split()[1]
    a_image = engine.images.get(a_reference)
    # The same image under another name, allow-listed as local by a careless operator: still refused.
    alias = f"regatta-test/alias:{secrets.token_hex(4)}"
    a_image.tag(*alias.split(":"))
    try:
        steal = "cat /hidden > /logs/agent/stolen.txt 2>&1; cat /hidden"
        attempts = {
            "prefix": {"environment": f'docker_image = "{a_image.id.removeprefix("sha256:")[:4]}"\n'},
            "digest-tag": {"environment": f'docker_image = "{a_reference}"\n'},
            "alias": {"environment": f'docker_image = "{alias}"\n'},
            "from": {"dockerfile": f"FROM {a_reference}\n"},
            "copy-from": {"dockerfile": f"FROM {BASE_IMAGE}\nCOPY --from={a_reference} /hidden /hidden\n"},
        }
        for name, spec in attempts.items():
            b = write_task(tmp_path / "b", name, solve=steal, **spec)
            if "environment" in spec:
                (b / "environment" / "Dockerfile").unlink()
            work = tmp_path / f"run-b-{name}"
            result = await run_trial(b, "oracle", work, local_images=[*LOCAL_IMAGES, alias])
            assert exception_type(result) in ("ImageRefusedError", "DockerfileRefusedError"), name
            message = result.exception_info.exception_message or ""
            assert "image id" in message or "platform's own images" in message, (name, message)
            assert rewards(result) is None and containers_of(engine, result.trial_name) == [], name
            assert not artifacts_hold(work, hidden), name
    finally:
        engine.images.remove(alias)


async def test_context_files_the_old_digest_skipped_make_their_own_image(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    cache = ImageCache(engine, tmp_path / "state", None, local_images=LOCAL_IMAGES)
    unique = secrets.token_hex(8)
    folders = {}
    for name, extra in (("plain", None), ("pycache", "__pycache__/x"), ("git", ".git/x")):
        folder = tmp_path / name / "environment"
        folder.mkdir(parents=True)
        (folder / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nRUN echo {unique}\nCOPY . /ctx\n")
        (folder / "app.py").write_text("print('same')\n")
        if extra:
            (folder / extra).parent.mkdir()
            (folder / extra).write_text(f"only in {name}\n")
        folders[name] = folder
    # Built in the attacker's order: the archive with the extra file first.
    images = {
        name: cache.built(folders[name], timeout_sec=120, network_mode="none", log=io.StringIO())
        for name in ("pycache", "git", "plain")
    }
    assert all(image.built for image in images.values())
    assert len({image.reference for image in images.values()}) == 3
    assert len({image.image_id for image in images.values()}) == 3

    def files_in(image_id: str) -> str:
        # The image's own entrypoint is pid 1's (pid1.py): the listing replaces it.
        return engine.containers.run(
            image_id,
            ["-c", "cd /ctx && find . -type f | sort"],
            entrypoint=["sh"],
            remove=True,
            network_mode="none",
            user="0",
        ).decode()

    assert files_in(images["plain"].image_id).split() == ["./Dockerfile", "./app.py"]
    assert "./__pycache__/x" in files_in(images["pycache"].image_id).split()
    assert "./.git/x" in files_in(images["git"].image_id).split()
    assert "./__pycache__/x" not in files_in(images["git"].image_id)
    # The same bytes again: the cached image, whichever folder they came from.
    again = tmp_path / "again" / "environment"
    again.mkdir(parents=True)
    for path in sorted(folders["plain"].iterdir()):
        (again / path.name).write_bytes(path.read_bytes())
    assert cache.built(again, timeout_sec=120, network_mode="none", log=io.StringIO()).image_id == (
        images["plain"].image_id
    )


async def test_dockerignore_shapes_both_the_context_and_the_digest(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    cache = ImageCache(engine, tmp_path / "state", None, local_images=LOCAL_IMAGES)
    folder = tmp_path / "environment"
    folder.mkdir()
    (folder / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nRUN echo {secrets.token_hex(8)}\nCOPY . /ctx\n")
    (folder / ".dockerignore").write_text("ignored/\n")
    before = cache.digest(folder)
    (folder / "ignored").mkdir()
    (folder / "ignored" / "x").write_text("x\n")
    assert cache.digest(folder) == before  # not sent, so not part of the key
    (folder / "kept").write_text("k\n")
    assert cache.digest(folder) != before


async def test_a_failing_build_names_its_step_and_is_built_once_per_run(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    marker = f"boom-{secrets.token_hex(6)}"
    task = write_task(
        tmp_path / "tasks",
        "broken",
        dockerfile=f"FROM {BASE_IMAGE}\nRUN echo ok\nRUN echo preparing && echo {marker} && exit 7\nRUN :\n",
    )
    results = [
        await run_trial(
            task, "oracle", tmp_path / f"attempt{i}", state_dir=str(tmp_path / "state"), run_id=run
        )
        for i, run in enumerate(("run-1", "run-1", "run-2"))
    ]
    messages = [r.exception_info.exception_message if r.exception_info else "" for r in results]
    # The task's own step exits non-zero: a task defect, remembered as one for the run (issue 38).
    assert all(exception_type(r) == TASK_DEFECT for r in results)
    first = messages[0]
    assert "Step 3/" in first and ": RUN echo preparing" in first and marker in first and "preparing" in first
    assert "returned a non-zero code: 7" in first
    assert messages[1] == first  # the same error, without building again
    logs = [build_log(tmp_path / f"attempt{i}", r) for i, r in enumerate(results)]
    assert [log.count("Step 3/") for log in logs] == [1, 0, 1]  # a new run builds again
    assert "failed; not built again" in logs[1]
    # The build log is among the attempt's downloads.
    downloads = dict(collect(trial_dir(tmp_path / "attempt0", results[0])))
    assert marker.encode() in downloads["environment-build.log"]


async def test_an_image_over_the_size_cap_is_removed(engine: docker.DockerClient, tmp_path: Path) -> None:
    cache = ImageCache(engine, tmp_path / "state", None, local_images=LOCAL_IMAGES, max_image_bytes=2**20)
    folder = tmp_path / "environment"
    folder.mkdir()
    (folder / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nRUN echo {secrets.token_hex(8)} > /x\n")
    started = time.monotonic()
    with pytest.raises(ImageBuildError, match="MiB an image may be; it was removed"):
        cache.built(folder, timeout_sec=120, network_mode="none", log=io.StringIO(), run_id="r")
    assert time.monotonic() - started < 120
    digest = cache.digest(folder)
    assert engine.images.list(filters={"label": f"{LABEL_DIGEST}={digest}"}) == []
    with pytest.raises(docker.errors.ImageNotFound):
        engine.images.get(f"{IMAGE_REPOSITORY}:{digest}")
