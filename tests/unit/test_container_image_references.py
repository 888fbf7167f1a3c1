"""Image references and Dockerfiles as the container environment reads them, before any engine sees
them: ids and the platform's own images are refused, ARG defaults are resolved, remote ADD sources pass
the outbound policy, and FROM/COPY --from are rewritten to the ids they resolved to."""

from __future__ import annotations

import pytest
from regatta_executor.container.dockerfile_policy import DockerfileRefusedError, plan
from regatta_executor.container.references import ImageRefusedError, parse_reference
from regatta_shared.outbound import OutboundPolicy

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
        "environment/Dockerfile line 3: ADD 'http://127.0.0.1:8080/n' refused (address not allowed)"
    )


def test_the_operator_allow_list_admits_an_internal_source_and_local_paths_pass() -> None:
    dockerfile = b"FROM debian\nADD http://127.0.0.1:8080/x /x\nADD local.txt /y\nCOPY a b /c/\n"
    assert plan(dockerfile, OutboundPolicy.parse("127.0.0.1:8080")).images[0][0] == 1
