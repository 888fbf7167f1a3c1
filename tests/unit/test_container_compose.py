"""A task's docker-compose.yaml as the container environment reads it: Harbor's base file and the task's
file merged by the Compose spec's rules, `${VAR}` from the given variables only, and every key that the
environment does not run (or that would reach the host) refused naming the file and the key."""

from __future__ import annotations

import ipaddress
import textwrap
from pathlib import Path

import pytest
from regatta_executor.container.compose.files import (
    MAX_DEPTH,
    ComposeError,
    merge,
    parse,
    substitute,
)
from regatta_executor.container.compose.model import ComposeProject
from regatta_executor.container.compose.project import load_project


def _task(tmp_path: Path, compose: str, *, files: dict[str, str] | None = None) -> Path:
    environment = tmp_path / "task" / "environment"
    environment.mkdir(parents=True)
    (environment / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (environment / "docker-compose.yaml").write_text(textwrap.dedent(compose))
    for name, text in (files or {}).items():
        (environment / name).parent.mkdir(parents=True, exist_ok=True)
        (environment / name).write_text(text)
    return environment


def _load(environment: Path, **kwargs: object) -> ComposeProject:
    variables = {"CONTEXT_DIR": str(environment.resolve()), "MAIN_IMAGE_NAME": "hb__x"}
    return load_project(environment, variables={**variables, **kwargs.pop("variables", {})}, **kwargs)  # type: ignore[arg-type]


def test_interpolation_forms() -> None:
    env = {"SET": "value", "EMPTY": ""}
    assert substitute("a${SET}b$SET-$$SET", env, "f", "k") == "avaluebvalue-$SET"
    assert substitute("${UNSET:-d} ${EMPTY:-d} ${EMPTY-d} ${UNSET-d}", env, "f", "k") == "d d  d"
    assert substitute("${SET:+alt} ${EMPTY:+alt} ${EMPTY+alt} ${UNSET+alt}", env, "f", "k") == "alt  alt "
    assert substitute("${UNSET:-${SET}/x}", env, "f", "k") == "value/x"
    assert substitute("${UNSET}", env, "f", "k") == ""
    with pytest.raises(ComposeError, match=r"f: k: required variable UNSET: say why"):
        substitute("${UNSET:?say why}", env, "f", "k")
    with pytest.raises(ComposeError, match=r"f: k: an unclosed"):
        substitute("${SET", env, "f", "k")
    with pytest.raises(ComposeError, match=r"invalid interpolation"):
        substitute("${1BAD}", env, "f", "k")


def test_interpolation_never_reads_the_executors_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REGATTA_SECRET_FOR_TEST", "hunter2")
    environment = _task(
        tmp_path,
        """
        services:
          main:
            environment:
              LEAK: "${REGATTA_SECRET_FOR_TEST:-none}"
              GIVEN: "${TASK_VAR}"
              BARE:
        """,
    )
    project = _load(environment, variables={"TASK_VAR": "from-task", "BARE": "x"})
    assert project.main.environment == {"LEAK": "none", "GIVEN": "from-task"}


def test_merge_follows_the_compose_rules() -> None:
    base = {
        "services": {
            "main": {
                "build": "ctx",
                "environment": ["A=1", "B=2"],
                "command": ["sh", "-c", "sleep infinity"],
                "volumes": ["data:/data", "other:/other"],
                "depends_on": ["db"],
                "expose": ["1"],
                "healthcheck": {"test": ["CMD", "a"], "retries": 3},
            }
        }
    }
    override = {
        "services": {
            "main": {
                "build": {"dockerfile": "D"},
                "environment": {"B": "3", "C": "4"},
                "command": "true",
                "volumes": [{"type": "volume", "source": "new", "target": "/data"}],
                "depends_on": {"cache": {"condition": "service_healthy"}},
                "expose": ["1", "2"],
                "healthcheck": {"test": ["CMD", "b"]},
            }
        }
    }
    main = merge([base, override])["services"]["main"]
    assert main["build"] == {"context": "ctx", "dockerfile": "D"}
    assert main["environment"] == {"A": "1", "B": "3", "C": "4"}
    assert main["command"] == "true"
    assert main["volumes"] == ["other:/other", {"type": "volume", "source": "new", "target": "/data"}]
    assert main["depends_on"] == {
        "db": {"condition": "service_started"},
        "cache": {"condition": "service_healthy"},
    }
    assert main["expose"] == ["1", "2"]
    assert main["healthcheck"] == {"test": ["CMD", "b"], "retries": 3}


def test_a_sidecar_behind_a_healthcheck_and_main_built_from_the_task_root(tmp_path: Path) -> None:
    environment = _task(
        tmp_path,
        """
        x-common: &common
          FROM_ANCHOR: "yes"
        services:
          main:
            build:
              context: ..
              dockerfile: environment/Dockerfile
            environment:
              <<: *common
              API: http://api:8000
            working_dir: /work
            user: "1000:1000"
            depends_on:
              api:
                condition: service_healthy
            volumes: [shared:/shared]
          api:
            build: ./api
            command: python3 -m http.server 8000
            ports: ["8000:8000"]
            expose: ["8000"]
            restart: always
            volumes:
              - type: volume
                source: shared
                target: /srv/shared
                read_only: true
            healthcheck:
              test: ["CMD-SHELL", "test -f /tmp/ready"]
              interval: 500ms
              timeout: 1m30s
              retries: 20
              start_period: 2
        volumes:
          shared:
        """,
        files={"api/Dockerfile": "FROM debian:bookworm-slim\n"},
    )
    project = _load(environment, main_environment={"FROM_HARBOR": "1", "API": "overridden"})
    main, api = project.main, project.services["api"]
    assert main.builds and main.build is not None
    assert main.build.context == environment.parent.resolve()
    assert main.build.dockerfile == "environment/Dockerfile"
    assert main.command == ["sh", "-c", "sleep infinity"]  # Harbor's base file
    assert main.environment == {"FROM_ANCHOR": "yes", "API": "overridden", "FROM_HARBOR": "1"}
    assert (main.working_dir, main.user, main.depends_on) == (
        "/work",
        "1000:1000",
        {"api": "service_healthy"},
    )
    assert api.build is not None and api.build.context == (environment / "api").resolve()
    assert api.command == ["python3", "-m", "http.server", "8000"]
    assert api.volumes[0].source == "shared" and api.volumes[0].read_only is True
    assert api.healthcheck is not None
    assert (api.healthcheck.interval_ns, api.healthcheck.timeout_ns) == (500_000_000, 90 * 10**9)
    assert (api.healthcheck.retries, api.healthcheck.start_period_ns) == (20, 2 * 10**9)
    assert project.volumes == ["shared"]
    assert [service.name for service in project.sidecars] == ["api"]
    assert any("services.api.ports is ignored" in note for note in project.notes)


def test_prebuilt_main_comes_from_harbors_prebuilt_file(tmp_path: Path) -> None:
    environment = _task(tmp_path, "services:\n  side:\n    image: redis:7\n  main:\n    depends_on: [side]\n")
    project = _load(environment, prebuilt=True, variables={"PREBUILT_IMAGE_NAME": "example/app:1"})
    assert project.main.image == "example/app:1" and not project.main.builds
    assert project.main.depends_on == {"side": "service_started"}


LABEL = "environment/docker-compose.yaml"
REFUSED = [
    ("services:\n  db:\n    image: x\n    privileged: true\n", "services.db.privileged is not supported"),
    ("services:\n  db:\n    image: x\n    cap_add: [SYS_ADMIN]\n", "services.db.cap_add is not supported"),
    ("services:\n  db:\n    image: x\n    devices: [/dev/sda]\n", "services.db.devices is not supported"),
    ("services:\n  db:\n    image: x\n    network_mode: host\n", "services.db.network_mode is not supported"),
    ("services:\n  main:\n    network_mode: container:x\n", "services.main.network_mode is not supported"),
    ("services:\n  db:\n    image: x\n    pid: host\n", "services.db.pid is not supported"),
    ("services:\n  db:\n    image: x\n    ipc: host\n", "services.db.ipc is not supported"),
    (
        "services:\n  db:\n    image: x\n    security_opt: [seccomp:unconfined]\n",
        "services.db.security_opt is not",
    ),
    ("services:\n  db:\n    image: x\n    sysctls: {a: 1}\n", "services.db.sysctls is not supported"),
    (
        "services:\n  db:\n    image: x\n    extra_hosts: [h:10.0.0.1]\n",
        "services.db.extra_hosts is not supported",
    ),
    (
        "services:\n  db:\n    image: x\n    volumes: [./data:/data]\n",
        "services.db.volumes[0]: host bind mounts",
    ),
    (
        "services:\n  db:\n    image: x\n    volumes: [/etc:/host-etc]\n",
        "services.db.volumes[0]: host bind mounts",
    ),
    (
        "services:\n  db:\n    image: x\n    volumes: [{type: bind, source: /, target: /h}]\n",
        "services.db.volumes[0].type bind is not supported",
    ),
    (
        "services:\n  main:\n    volumes: [d:/d]\n"
        "volumes:\n  d:\n    driver_opts: {type: none, o: bind, device: /}\n",
        "volumes.d.driver_opts is not supported",
    ),
    (
        "services:\n  main:\n    build: {context: ../..}\n",
        "services.main.build.context '../..' is not a folder inside",
    ),
    (
        "services:\n  main:\n    build: {context: /}\n",
        "services.main.build.context '/' is not a folder inside",
    ),
    (
        "services:\n  main:\n    build: {dockerfile: ../../../etc/passwd}\n",
        "services.main.build.dockerfile '../../../etc/passwd' resolves to ",
    ),
    ("services:\n  main:\n    build: {network: host}\n", "services.main.build.network is not supported"),
    ("include: [../other.yaml]\nservices: {}\n", "include is not supported"),
    ("services:\n  db:\n    image: x\n    env_file: [/etc/passwd]\n", "services.db.env_file is not"),
    ("services:\n  db:\n    image: x\n    env_file: .env\n", "services.db.env_file is not supported"),
    (
        "services:\n  db:\n    image: x\n    deploy: {resources: {limits: {memory: 1g}}}\n",
        "services.db.deploy is not supported",
    ),
    ("services:\n  db:\n    image: x\n    profiles: [debug]\n", "services.db.profiles is not supported"),
    ("services:\n  db:\n    image: x\n    secrets: [token]\n", "services.db.secrets is not supported"),
    ("services:\n  db:\n    image: x\n    platform: linux/arm64\n", "services.db.platform is not supported"),
    ("services:\n  db:\n    image: x\n    network_mode: host\n", "services.db.network_mode is not supported"),
    ("secrets:\n  token: {file: /etc/shadow}\nservices: {}\n", "secrets is not supported"),
    ("configs:\n  c: {file: /etc/hosts}\nservices: {}\n", "configs is not supported"),
    ("networks:\n  backend: {}\n", "networks: only the default network is supported"),
    (
        "services:\n  main:\n    networks: {default: {aliases: [db]}}\n",
        "services.main.networks.default: network options are not supported",
    ),
    ("volumes:\n  d: {external: true}\n", "volumes.d.external is not supported"),
    ("services:\n  db:\n    extends: {file: x.yaml, service: y}\n", "services.db.extends is not supported"),
    ("services:\n  main:\n    networks: [other]\n", "services.main.networks: only the default network"),
    ("networks:\n  default:\n    driver: host\n", "networks.default: network options are not supported"),
    (
        "services:\n  main:\n    command: [bash]\n",
        "services.main.command is not supported: Harbor's `sleep infinity`",
    ),
    (
        "services:\n  db:\n    image: x\n    depends_on: [main]\n",
        "services.db.depends_on.main is not supported",
    ),
    ("services:\n  main:\n    depends_on: [ghost]\n", "services.main.depends_on: no service 'ghost'"),
    (
        "services:\n  a:\n    image: x\n    depends_on: [b]\n  b:\n    image: x\n    depends_on: [a]\n",
        "a dependency cycle",
    ),
    (
        "services:\n  db:\n    image: 'x; rm -rf /'\n",
        "services.db.image 'x; rm -rf /' is not an image reference",
    ),
    ("services:\n  db:\n    image: x\n    user: 'root; id'\n", "services.db.user is not a user name"),
    ("services:\n  db:\n    image: x\n    volumes: [d:/logs/verifier]\nvolumes: {d: {}}\n", "reserved"),
    (
        "services:\n  db:\n    build: ./db\n",
        "services.db.build.context './db' is not a folder inside the task",
    ),
    ("services:\n  db:\n    image: x\n    volumes: [undeclared:/d]\n", "'undeclared' is not declared"),
    ("services:\n  db: {}\n", "services.db has neither build nor image"),
    (
        "services:\n  db:\n    image: x\n    depends_on: {main2: {condition: service_exploded}}\n",
        "condition service_exploded is not one of",
    ),
    (
        "services:\n  db:\n    image: x\n    healthcheck: {test: [CMD, x], interval: soon}\n",
        "interval 'soon' is",
    ),
    ("services: [main]\n", "services is not a mapping"),
    ("- a\n", "the top level is not a mapping"),
    ("services:\n  main:\n    environment: {A: !!python/object:os.system x}\n", "not valid YAML"),
    ("services:\n  main:\n    environment: !reset {}\n", "not valid YAML"),
]


@pytest.mark.parametrize(("compose", "said"), REFUSED, ids=[said[:40] for _, said in REFUSED])
def test_refused_keys_are_named_with_the_file(tmp_path: Path, compose: str, said: str) -> None:
    environment = _task(tmp_path, compose)
    with pytest.raises(ComposeError) as raised:
        _load(environment)
    assert str(raised.value).startswith(f"{LABEL}: "), raised.value
    assert said in str(raised.value), raised.value


def test_hostile_sizes_are_refused_before_parsing() -> None:
    with pytest.raises(ComposeError, match=r"^f: nested deeper than"):
        parse("a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "f")
    with pytest.raises(ComposeError, match=r"^f: larger than 256 KiB"):
        parse("x: " + "a" * 300_000, "f")
    # A billion laughs: a few lines whose aliases name a huge tree.
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    letters = "abcdefghij"
    for index in range(1, 9):
        name, previous = letters[index], letters[index - 1]
        bomb += f"{name}: &{name} [{', '.join(['*' + previous] * 10)}]\n"
    with pytest.raises(ComposeError, match=r"^f: more than 50000 values"):
        parse(bomb, "f")


def test_sidecars_start_after_what_they_depend_on(tmp_path: Path) -> None:
    environment = _task(
        tmp_path,
        """
        services:
          main: {depends_on: [api]}
          api:
            image: x
            depends_on:
              db: {condition: service_healthy}
              migrate: {condition: service_completed_successfully}
          migrate: {image: x, depends_on: [db]}
          db: {image: x}
          cache: {image: x}
        """,
    )
    project = _load(environment)
    order = [service.name for service in project.sidecars]
    assert sorted(order) == ["api", "cache", "db", "migrate"]
    assert order.index("db") < order.index("migrate") < order.index("api")
    assert project.services["api"].depends_on == {
        "db": "service_healthy",
        "migrate": "service_completed_successfully",
    }


def test_a_compose_file_linked_to_a_host_file_is_refused(tmp_path: Path) -> None:
    """The attack: a task archive whose docker-compose.yaml links to a YAML file of the executor's host
    (here one holding a secret) would make the host file's contents the services' environment."""
    host_file = tmp_path / "host-secrets.yaml"
    host_file.write_text("services:\n  main:\n    environment:\n      TOKEN: host-secret\n")
    environment = _task(tmp_path, "services: {}\n")
    (environment / "docker-compose.yaml").unlink()
    (environment / "docker-compose.yaml").symlink_to(host_file)
    with pytest.raises(ComposeError, match=r"^environment/docker-compose\.yaml: a symbolic link"):
        _load(environment)


def test_the_env_file_fills_variables_below_the_given_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOST_ONLY", "leaked")
    environment = _task(
        tmp_path,
        """
        services:
          main:
            environment:
              FROM_DOTENV: "${DOTENV_ONLY}"
              GIVEN_WINS: "${BOTH}"
              LITERAL: "${REFERS}"
        """,
        files={".env": "# comment\nDOTENV_ONLY=from .env\nexport BOTH='from .env'\nREFERS=${HOST_ONLY}\n"},
    )
    project = _load(environment, variables={"BOTH": "given"})
    assert project.main.environment == {
        "FROM_DOTENV": "from .env",
        "GIVEN_WINS": "given",
        "LITERAL": "${HOST_ONLY}",  # never this process's environment
    }
    (environment / ".env").unlink()
    (environment / ".env").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ComposeError, match=r"^environment/\.env: a symbolic link"):
        _load(environment)


def test_an_attempt_network_gets_the_sandbox_bridges_rules_and_accepts_its_own_traffic() -> None:
    """Kept in step with network.py: if the sandbox bridge's rules change (a DNS forwarder, say), the
    compose networks' must change with them."""
    from regatta_executor.container.compose.sidecars import attempt_rules, bridge_name
    from regatta_executor.container.network import bridge as network

    bridge = bridge_name("regatta-x-net")
    gateway = ipaddress.IPv4Address("172.30.0.1")
    assert len(bridge) <= 15 and bridge.startswith("rgc")
    rules = attempt_rules(bridge, gateway)
    assert rules[0] == ("filter", "DOCKER-USER", ["-i", bridge, "-o", bridge, "-j", "ACCEPT"])
    assert rules[1:] == network.rules(bridge, gateway)


def test_main_built_from_a_dockerfile_outside_environment(tmp_path: Path) -> None:
    """Harbor's base file names environment/ as the context and its Dockerfile: where the task's file
    moves both, only the merged build has to exist."""
    environment = _task(
        tmp_path, "services:\n  main:\n    build: {context: .., dockerfile: docker/Dockerfile}\n"
    )
    (environment / "Dockerfile").unlink()
    (environment.parent / "docker").mkdir()
    (environment.parent / "docker" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    build = _load(environment).main.build
    assert build is not None and (build.context, build.dockerfile) == (
        environment.parent.resolve(),
        "docker/Dockerfile",
    )
    (environment.parent / "docker" / "Dockerfile").unlink()
    with pytest.raises(
        ComposeError, match=r"^environment/docker-compose\.yaml: services\.main\.build\.dockerfile"
    ):
        _load(environment)


def test_an_absolute_dockerfile_inside_the_context_is_taken_as_compose_takes_it(tmp_path: Path) -> None:
    """As real tasks write it: `${CONTEXT_DIR}/Dockerfile` with the task's root as the context (Compose
    takes an absolute dockerfile as it is); a sidecar's too, and a link to a file of the context."""
    environment = _task(
        tmp_path,
        """
        services:
          main:
            build:
              context: ${CONTEXT_DIR}/..
              dockerfile: ${CONTEXT_DIR}/Dockerfile
          api:
            build: {context: ./api, dockerfile: "${CONTEXT_DIR}/api/linked.Dockerfile"}
        """,
        files={"api/real.Dockerfile": "FROM debian:bookworm-slim\n"},
    )
    (environment / "api" / "linked.Dockerfile").symlink_to("real.Dockerfile")
    project = _load(environment)
    main, api = project.main.build, project.services["api"].build
    assert main is not None and (main.context, main.dockerfile) == (
        environment.parent.resolve(),
        "environment/Dockerfile",
    )
    assert api is not None and (api.context, api.dockerfile) == (
        (environment / "api").resolve(),
        "real.Dockerfile",
    )


def _hostile(tmp_path: Path, dockerfile: str, context: str = "${CONTEXT_DIR}/..") -> Path:
    """A task whose main names `dockerfile`; beside the task, a file that makes a valid Dockerfile (an
    attacker's aim: a file of the executor's host read and sent as the build's Dockerfile)."""
    environment = _task(
        tmp_path,
        f"services:\n  main:\n    build:\n      context: {context}\n      dockerfile: {dockerfile}\n",
    )
    (tmp_path / "host-file").write_text("FROM debian:bookworm-slim\n")
    (environment / "api").mkdir()
    return environment


@pytest.mark.parametrize(
    ("dockerfile", "context", "resolved"),
    [
        ("/etc/passwd", "${CONTEXT_DIR}/..", "/etc/passwd"),
        ("${CONTEXT_DIR}/../../host-file", "${CONTEXT_DIR}/..", "{tmp}/host-file"),
        ("${CONTEXT_DIR}/../../../../../../../../../../etc/shadow", "${CONTEXT_DIR}/..", "/etc/shadow"),
        # Inside the task, outside the context: only the context is sent to the builder.
        ("${CONTEXT_DIR}/Dockerfile", "${CONTEXT_DIR}/api", "{tmp}/task/environment/Dockerfile"),
    ],
    ids=["host-file", "dot-dot", "far-dot-dot", "task-not-context"],
)
def test_an_absolute_dockerfile_out_of_the_context_is_refused_naming_where_it_leads(
    tmp_path: Path, dockerfile: str, context: str, resolved: str
) -> None:
    environment = _hostile(tmp_path, dockerfile, context)
    with pytest.raises(ComposeError) as raised:
        _load(environment)
    named = dockerfile.replace("${CONTEXT_DIR}", str(environment.resolve()))
    said = resolved.format(tmp=tmp_path.resolve())
    assert str(raised.value).startswith(
        f"{LABEL}: services.main.build.dockerfile {named!r} resolves to {said}, outside the build context "
    ), raised.value


@pytest.mark.parametrize("link", ["file", "folder"])
def test_a_dockerfile_linked_out_of_the_context_is_refused_naming_the_linked_file(
    tmp_path: Path, link: str
) -> None:
    """A link inside the context (the file itself, or a folder on its path) to the host's files: the
    path resolves, links followed, out of the context."""
    if link == "file":
        environment = _hostile(tmp_path, "${CONTEXT_DIR}/Dockerfile.evil")
        (environment / "Dockerfile.evil").symlink_to(tmp_path / "host-file")
        target = tmp_path.resolve() / "host-file"
    else:
        environment = _hostile(tmp_path, "${CONTEXT_DIR}/linked/host-file")
        (environment / "linked").symlink_to(tmp_path)
        target = tmp_path.resolve() / "host-file"
    with pytest.raises(ComposeError, match=r"resolves to (\S+), outside the build context") as raised:
        _load(environment)
    assert f"resolves to {target}, outside the build context {environment.parent.resolve()}" in str(
        raised.value
    ), raised.value
