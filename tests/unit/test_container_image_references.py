"""Image references and Dockerfiles as the container environment reads them, before any engine sees
them: ids and the platform's own images are refused, ARG defaults are resolved, remote ADD sources pass
the outbound policy, and FROM/COPY --from are rewritten to the ids they resolved to."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from regatta_executor.container.image.build_context import BuildContextError, build_context
from regatta_executor.container.image.dockerfile_policy import DockerfileRefusedError, plan
from regatta_executor.container.image.references import ImageRefusedError, parse_reference
from regatta_shared.security.outbound import OutboundPolicy

ID = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("text", "normalised", "familiar"),
    [
        ("debian", "docker.io/library/debian:latest", "debian:latest"),
        ("debian:bookworm-slim", "docker.io/library/debian:bookworm-slim", "debian:bookworm-slim"),
        ("docker.io/library/debian:12", "docker.io/library/debian:12", "debian:12"),
        ("foo/bar:1", "docker.io/foo/bar:1", "foo/bar:1"),
        ("ghcr.io/org/tool:2", "ghcr.io/org/tool:2", "ghcr.io/org/tool:2"),
        ("localhost:5000/x", "localhost:5000/x:latest", "localhost:5000/x:latest"),
        (
            f"debian@{ID[:7]}{'0' * 64}",
            f"docker.io/library/debian@sha256:{'0' * 64}",
            f"debian@sha256:{'0' * 64}",
        ),
    ],
)
def test_references_are_normalised_as_the_engine_does(text: str, normalised: str, familiar: str) -> None:
    reference = parse_reference(text, "docker_image")
    assert (str(reference), reference.familiar) == (normalised, familiar)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("516c", "image id"),
        ("516c0a9b", "image id"),
        (ID, "image id"),
        ("ab" * 32, "image id"),
        ("regatta-env:0123abcd", "platform's own"),
        ("docker.io/library/regatta-env:x", "platform's own"),
        ("Debian:12", "not an image reference"),
        ("debian:../x", "not an image reference"),
        ("-v/x", "not an image reference"),
        ("a" * 300, "not an image reference"),
        ("debian\n", "not an image reference"),
    ],
)
def test_ids_platform_images_and_non_references_are_refused(text: str, reason: str) -> None:
    with pytest.raises(ImageRefusedError, match=reason):
        parse_reference(text, "docker_image")


def test_from_arg_defaults_are_resolved_and_stages_and_scratch_are_not_images() -> None:
    dockerfile = (
        b"ARG BASE=debian:bookworm-slim\n"
        b"FROM ${BASE} AS build\n"
        b"RUN true\n"
        b"FROM scratch\n"
        b"FROM build\n"
        b"COPY --from=build /a /b\n"
        b"COPY --from=0 /a /b\n"
        b"COPY --from=ghcr.io/org/tool:1 /bin/tool /usr/bin/tool\n"
    )
    result = plan(dockerfile, OutboundPolicy())
    assert [(line, str(ref)) for line, ref in result.images] == [
        (2, "docker.io/library/debian:bookworm-slim"),
        (8, "ghcr.io/org/tool:1"),
    ]
    ids = {"docker.io/library/debian:bookworm-slim": "sha256:" + "1" * 64, "ghcr.io/org/tool:1": ID}
    rewritten = result.rewritten(ids).decode().splitlines()
    assert rewritten[1] == f"FROM sha256:{'1' * 64} AS build"
    assert rewritten[4] == "FROM build"
    assert rewritten[7] == f"COPY --from={ID} /bin/tool /usr/bin/tool"
    assert len(rewritten) == 8  # the line numbers the user wrote stay


@pytest.mark.parametrize(
    "dockerfile",
    [
        b"FROM debian\nADD http://127.0.0.1:8080/x /x\n",
        b"FROM debian\nARG U=http://127.0.0.1:8080\nADD ${U}/nonce /x\n",
        b"FROM debian\nENV U=http://169.254.169.254\nADD $U/latest/meta-data /x\n",
        b'FROM debian\nADD ["http://10.0.0.1/x", "/x"]\n',
        b"FROM debian\nADD --chown=1:1 https://[::1]:9/x /x\n",
        b"FROM debian\nADD http://2130706433/x /x\n",
        b"FROM debian\nADD git@127.0.0.1:repo.git /src\n",
        b"FROM debian\nADD ftp://example.org/x /x\n",
        b"FROM regatta-env:abc\n",
        b"FROM 516c\n",
        b"FROM debian\nCOPY --from=regatta-env:abc /secret /x\n",
        b"FROM $UNDEFINED\n",
        b"FROM debian\nARG X\nCOPY --from=$X /a /b\n",
        b"# escape=`\nFROM debian\nADD http://127.0.0.1/x `\n /x\n",
    ],
)
def test_fetches_the_policy_refuses_and_unresolvable_sources_are_refused(dockerfile: bytes) -> None:
    with pytest.raises(ImageRefusedError) as refused:
        plan(dockerfile, OutboundPolicy())
    message = str(refused.value)
    assert "environment/Dockerfile" in message or "FROM" in message


def test_a_refusal_names_the_line_and_the_source() -> None:
    with pytest.raises(DockerfileRefusedError) as refused:
        plan(b"FROM debian\n\nADD http://127.0.0.1:8080/n /x\n", OutboundPolicy())
    assert str(refused.value) == (
        "environment/Dockerfile line 3: ADD 'http://127.0.0.1:8080/n' "
        "refused (address not allowed unless REGATTA_OUTBOUND_ALLOW names it)"
    )


def test_the_operator_allow_list_admits_an_internal_source_and_local_paths_pass() -> None:
    dockerfile = b"FROM debian\nADD http://127.0.0.1:8080/x /x\nADD local.txt /y\nCOPY a b /c/\n"
    assert plan(dockerfile, OutboundPolicy.parse("127.0.0.1:8080")).images[0][0] == 1


def test_an_add_of_a_url_becomes_a_copy_of_the_file_the_executor_fetches() -> None:
    """The engine would fetch it itself (redirects and a second lookup past the policy): the plan names
    the URL for the executor's guarded fetch and writes a COPY of the file, with the ADD's flags."""
    allowed = OutboundPolicy.parse("127.0.0.1:8080")
    dockerfile = (
        b"FROM debian\nARG WHERE=/opt/\nADD --chown=1:2 http://127.0.0.1:8080/a/tool.tgz \\\n"
        b"  http://127.0.0.1:8080/b/data.txt ${WHERE}\nADD local.tgz /x\n"
    )
    result = plan(dockerfile, allowed)
    assert [(a.url, a.name) for a in result.remote_adds] == [
        ("http://127.0.0.1:8080/a/tool.tgz", ".regatta-add/0/tool.tgz"),
        ("http://127.0.0.1:8080/b/data.txt", ".regatta-add/1/data.txt"),
    ]
    assert result.rewritten({"docker.io/library/debian:latest": "sha256:x"}).decode().splitlines() == [
        "FROM sha256:x",
        "ARG WHERE=/opt/",
        'COPY --chown=1:2 [".regatta-add/0/tool.tgz", ".regatta-add/1/data.txt", "/opt/"]',
        "",
        "ADD local.tgz /x",
    ]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("ADD http://127.0.0.1:8080/x local.txt /d/", "ADD mixes URLs with other sources; split it"),
        ("ADD http://127.0.0.1:8080/ /d/", "ADD 'http://127.0.0.1:8080/': no file name in the URL for '/d/'"),
        (
            "ADD --checksum=sha256:00 http://127.0.0.1:8080/x /x",
            "ADD '--checksum' is not supported with a URL",
        ),
    ],
)
def test_an_add_of_a_url_that_cannot_be_a_copy_is_refused(line: str, problem: str) -> None:
    with pytest.raises(DockerfileRefusedError) as refused:
        plan(f"FROM debian\n{line}\n".encode(), OutboundPolicy.parse("127.0.0.1:8080"))
    assert str(refused.value) == f"environment/Dockerfile line 2: {problem}"


def test_the_folder_of_fetched_files_is_the_platforms_alone(tmp_path: Path) -> None:
    """A task's own `.regatta-add/0/x` would otherwise stand in for (or collide with) a fetched file."""
    environment = tmp_path / "environment"
    (environment / ".regatta-add" / "0").mkdir(parents=True)
    (environment / ".regatta-add" / "0" / "tool.tgz").write_text("the task's own\n")
    fetched = tmp_path / "fetched"
    fetched.write_text("fetched\n")
    with pytest.raises(BuildContextError) as refused:
        build_context(
            environment, extra_files=[(".regatta-add/0/tool.tgz", fetched)], reserved=".regatta-add"
        )
    assert str(refused.value) == "environment/.regatta-add is reserved for the files of remote ADDs"

    (environment / ".regatta-add" / "0" / "tool.tgz").unlink()
    (environment / ".regatta-add" / "0").rmdir()
    (environment / ".regatta-add").rmdir()
    (environment / "Dockerfile").write_text("FROM debian\n")
    context = build_context(
        environment, extra_files=[(".regatta-add/0/tool.tgz", fetched)], reserved=".regatta-add"
    )
    with tarfile.open(fileobj=context.file) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert members[".regatta-add/0/tool.tgz"].mode == 0o600
        assert tar.extractfile(members[".regatta-add/0/tool.tgz"]).read() == b"fetched\n"  # type: ignore[union-attr]
    context.file.close()
