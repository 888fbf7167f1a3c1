"""The `container` environment runs a task as Harbor's docker environment does (docs/benchmarks.md):
the image's ENTRYPOINT starts the task's services (daemons too), the image's ENV, WORKDIR and USER hold
for the agent's and the verifier's commands, root has Docker's default capabilities, setuid programs
work, and `[agent].user` and `[verifier].user` name who runs each phase. Tasks of the test's own."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import docker
import pytest

from tests.integration.container_support import (
    BASE_IMAGE,
    containers_of,
    exception_type,
    rewards,
    run_trial,
    started_environment,
    trial_dir,
    write_task,
)

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("built_images_removed")]
DOCKER_DEFAULT_CAPABILITIES = "00000000a80425fb"

START_SERVICE = """#!/bin/sh
# The task's service: a web server on loopback, then the container's command (Harbor's keepalive).
python3 -m http.server 8765 --bind 127.0.0.1 --directory /srv/www > /tmp/http.log 2>&1 &
exec "$@"
"""
FETCH = (
    "for i in $(seq 200); do python3 -c 'import urllib.request as u; "
    'print(u.urlopen("http://127.0.0.1:8765/hello.txt").read().decode().strip())\' 2>/dev/null && break; '
    "sleep 0.05; done"
)


async def test_an_entrypoint_service_serves_the_agent_and_the_verifier_with_the_images_env_workdir_user(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    task = write_task(
        tmp_path / "tasks",
        "service",
        dockerfile=f"""
            FROM {BASE_IMAGE}
            RUN useradd -m -u 1500 svc && mkdir -p /srv/www /srv/work && chown svc /srv/work \\
                && echo served-by-the-entrypoint > /srv/www/hello.txt && echo {secrets.token_hex(8)} > /unique
            COPY start-service /usr/local/bin/start-service
            ENV GREETING="hello from ENV"
            WORKDIR /srv/work
            USER svc
            ENTRYPOINT ["start-service"]
            CMD ["never-run"]
        """,
        solve=f"""
            {FETCH} > answer.txt
            printf '%s\\n' "$GREETING" "$(pwd)" "$(id -un)" >> answer.txt
        """,
        test=f"""
            expected=$(printf 'served-by-the-entrypoint\\nhello from ENV\\n/srv/work\\nsvc\\n')
            again=$({FETCH})
            whoami > /logs/verifier/user.txt
            if [ "$(cat /srv/work/answer.txt)" = "$expected" ] \\
               && [ "$again" = served-by-the-entrypoint ]; then echo 1; else echo 0; fi \\
              > /logs/verifier/reward.txt
        """,
    )
    start = task / "environment" / "start-service"
    start.write_text(START_SERVICE)
    start.chmod(0o755)

    result = await run_trial(task, "oracle", tmp_path)
    assert exception_type(result) is None, result.exception_info
    assert rewards(result) == {"reward": 1.0}
    assert (trial_dir(tmp_path, result) / "verifier" / "user.txt").read_text() == "svc\n"
    assert containers_of(engine, result.trial_name) == []


async def test_root_has_dockers_default_capabilities(engine: docker.DockerClient, tmp_path: Path) -> None:
    """What installs and setup scripts do as root: add a user, chown to it, write into another user's
    private folder, drop to a user with its groups (setgroups)."""
    task = write_task(
        tmp_path / "tasks",
        "root",
        dockerfile=f"""
            FROM {BASE_IMAGE}
            RUN useradd -m owner && mkdir -m 700 /home/owner/private \\
                && chown owner:owner /home/owner/private && echo {secrets.token_hex(8)} > /unique
        """,
        solve="""
            grep CapEff /proc/self/status | cut -f2 > /logs/agent/capeff.txt
            useradd -m newcomer
            echo data > /srv/owned && chown newcomer:newcomer /srv/owned
            echo root-was-here > /home/owner/private/note
            setpriv --reuid=newcomer --regid=newcomer --init-groups id -un > /logs/agent/dropped.txt
            su -s /bin/sh -c 'id -un' owner >> /logs/agent/dropped.txt
        """,
        test="""
            if [ "$(stat -c %U:%G /srv/owned)" = newcomer:newcomer ] \\
               && [ "$(cat /home/owner/private/note)" = root-was-here ] \\
               && [ "$(stat -c %U /home/owner/private)" = owner ] \\
               && [ "$(cat /logs/agent/dropped.txt)" = "$(printf 'newcomer\\nowner')" ]; then
                echo 1; else echo 0; fi > /logs/verifier/reward.txt
        """,
    )
    result = await run_trial(task, "oracle", tmp_path)
    assert exception_type(result) is None, result.exception_info
    agent = trial_dir(tmp_path, result) / "agent"
    assert (agent / "capeff.txt").read_text().strip() == DOCKER_DEFAULT_CAPABILITIES
    assert rewards(result) == {"reward": 1.0}, (agent / "dropped.txt").read_text()


@pytest.mark.parametrize("agent_user", ['"runner"', "1234"])
async def test_agent_and_verifier_run_as_the_users_the_task_names(
    engine: docker.DockerClient, tmp_path: Path, agent_user: str
) -> None:
    task = write_task(
        tmp_path / "tasks",
        "users",
        dockerfile=f"""
            FROM {BASE_IMAGE}
            RUN useradd -m -u 1234 runner && mkdir /work && chown runner /work \\
                && echo {secrets.token_hex(8)} > /unique
            WORKDIR /work
        """,
        solve="""
            id -un > /work/agent-user
            touch /work/by-agent
        """,
        test="""
            id -un > /logs/verifier/user.txt
            touch /work/by-verifier
            if [ "$(cat /work/agent-user)" = runner ] && [ "$(stat -c %U /work/by-agent)" = runner ] \\
               && [ "$(stat -c %U /work/by-verifier)" = root ]; then echo 1; else echo 0; fi \\
              > /logs/verifier/reward.txt
        """,
    )
    toml = task / "task.toml"
    text = toml.read_text().replace("[agent]\n", f"[agent]\nuser = {agent_user}\n", 1)
    toml.write_text(text.replace("[verifier]\n", '[verifier]\nuser = "root"\n', 1))
    result = await run_trial(task, "oracle", tmp_path)
    assert exception_type(result) is None, result.exception_info
    assert (trial_dir(tmp_path, result) / "verifier" / "user.txt").read_text() == "root\n"
    assert rewards(result) == {"reward": 1.0}


START_DAEMON = """#!/bin/sh
# The task's service daemonizes (a session of its own, as start-stop-daemon and most daemons do). Each
# beat replaces the file whole: a reader never sees it truncated and not yet written.
setsid sh -c 'while :; do date +%s%N > /tmp/beat.new; mv /tmp/beat.new /tmp/daemon-beat; sleep 0.05; done' \
    > /dev/null 2>&1 < /dev/null &
exec "$@"
"""


@pytest.mark.parametrize("policy", ["record", "enforce"])
async def test_a_service_the_entrypoint_daemonized_runs_into_the_verifier(
    engine: docker.DockerClient, tmp_path: Path, policy: str
) -> None:
    """The image's own service runs for the verifier under either policy (under `enforce` the container
    restarts, its ENTRYPOINT with it); the agent's process too under `record` (as under Harbor), not
    under `enforce`."""
    task = write_task(
        tmp_path / "tasks",
        "daemon",
        dockerfile=f"""
            FROM {BASE_IMAGE}
            COPY start-daemon /usr/local/bin/start-daemon
            RUN chmod 755 /usr/local/bin/start-daemon && echo {secrets.token_hex(8)} > /unique
            ENTRYPOINT ["start-daemon"]
        """,
    )
    (task / "environment" / "start-daemon").write_text(START_DAEMON)
    tests = tmp_path / "verifier-tests"
    tests.mkdir()
    (tests / "test.sh").write_text("#!/bin/bash\n")
    async with started_environment(tmp_path, task, verifier_integrity=policy) as env:
        # Until the daemon runs, seen from the host (`docker top` is no exec in the container).
        for _ in range(200):
            if any("daemon-beat" in " ".join(row) for row in engine.api.top(env.container_name)["Processes"]):
                break
            await asyncio.sleep(0.05)
        started = await env.exec(
            "setsid sh -c 'while :; do sleep 0.05; done' > /dev/null 2>&1 < /dev/null & echo agent-loop"
        )
        assert started.stdout == "agent-loop\n", started
        await env.upload_dir(tests, "/tests")  # the verifier starts

        left = (await env.exec("ps -eo sid,args")).stdout or ""
        assert "daemon-beat" in left, left
        assert left.count("while :; do sleep 0.05") == (1 if policy == "record" else 0), left
        beat = (await env.exec("cat /tmp/daemon-beat; sleep 0.3; cat /tmp/daemon-beat")).stdout or ""
        first, second = beat.split()
        assert int(second) > int(first)  # still beating


async def test_an_images_setuid_program_works_for_a_non_root_user(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """No no-new-privileges, as under Harbor: a task's sudo-like program raises its user's privileges."""
    dockerfile = f"""
        FROM {BASE_IMAGE}
        RUN cp /usr/bin/id /usr/local/bin/setuid-id && chmod 4755 /usr/local/bin/setuid-id \\
            && echo {secrets.token_hex(8)} > /unique
    """
    async with started_environment(
        tmp_path, write_task(tmp_path / "tasks", "setuid", dockerfile=dockerfile)
    ) as env:
        result = await env.exec("id -u; setuid-id -u; grep NoNewPrivs /proc/self/status", user="nobody")
        assert result.stdout == "65534\n0\nNoNewPrivs:\t0\n", result
