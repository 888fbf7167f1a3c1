"""Issue 27, findings 4-6, and issue 36, on a real engine: under the `enforce` policy the agent cannot
grade itself (an executable or library of the image changed or shadowed, with nothing in the container to
explain it, ends the attempt `failed`, naming the files); under the default `record` policy the same is
evidence, as under Harbor; damage from inside is the agent's failure (statistics.md §1); the writable
layer is capped (storage_mb); and the listing and digest the evidence rests on see every change.

Each attack is the oracle's solve.sh; each task's test always fails, so a reward of 1 would be the
attack's."""

from __future__ import annotations

import asyncio
import re
import shlex
from pathlib import Path

import docker
import pytest
from regatta_executor.attempt.integrity_record import read_integrity_record
from regatta_executor.attempt.sandbox_faults import StorageLimitExceededError
from regatta_executor.container.files.layer_usage import HostLayer
from regatta_executor.container.files.storage_cap import next_interval

from tests.integration.container_support import (
    containers_of,
    exception_type,
    outcome,
    rewards,
    run_trial,
    started_environment,
    trial_dir,
    write_task,
)

pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("built_images_removed")]

ALWAYS_FAILS = "echo 0 > /logs/verifier/reward.txt\n"
# A bash that runs the real one, then writes reward 1: what a test run through it would report.
WRAPPER = """
cp /usr/bin/bash /opt/real-bash
printf '#!/opt/real-bash\\n/opt/real-bash "$@"; s=$?; echo 1 > /logs/verifier/reward.txt; exit $s\\n' \\
    > /tmp/wrapper
chmod 755 /tmp/wrapper
"""
# Proof that the wrapper works where it was put: run through it, it writes reward 1.
PROVE = """
{runs} -c true
cat /logs/verifier/reward.txt > /logs/agent/rigged.txt; rm -f /logs/verifier/reward.txt
"""

ATTACKS = {
    # Replaced in place (a rename: the running bash keeps its own inode).
    "replace-bash": (
        WRAPPER + "mv /tmp/wrapper /usr/bin/bash\n" + PROVE.format(runs="/bin/bash"),
        "/usr/bin/bash (changed)",
    ),
    # Shadowed: earlier in PATH than /usr/bin, so `bash -c` finds the wrapper first.
    "shadow-bash": (
        WRAPPER + "mv /tmp/wrapper /usr/local/bin/bash\n" + PROVE.format(runs="bash"),
        "/usr/local/bin/bash (added)",
    ),
    # /bin (a symlink to /usr/bin in the image) replaced by a folder holding the wrapper.
    "replace-bin": (
        WRAPPER + "rm /bin && mkdir /bin && mv /tmp/wrapper /bin/bash\n" + PROVE.format(runs="/bin/bash"),
        "/bin/bash (added)",
    ),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_under_enforce_an_agent_that_rigs_bash_fails_and_the_reason_names_the_file(
    engine: docker.DockerClient, tmp_path: Path, attack: str
) -> None:
    solve, named = ATTACKS[attack]
    task = write_task(tmp_path / "tasks", attack, solve=solve, test=ALWAYS_FAILS)
    result = await run_trial(task, "oracle", tmp_path, verifier_integrity="enforce")

    rigged = trial_dir(tmp_path, result) / "agent" / "rigged.txt"
    assert rigged.read_text() == "1\n", "the wrapper was in place and wrote reward 1 when run"
    assert exception_type(result) == "SandboxTamperedError"
    assert named in result.exception_info.exception_message, result.exception_info.exception_message
    assert rewards(result) is None
    assert outcome(result) == "failed"
    assert containers_of(engine, result.trial_name) == []


@pytest.mark.parametrize(
    ("solve", "named"),
    [
        ("touch /etc/ld.so.preload\n", "/etc/ld.so.preload (added)"),
        (
            "cp /usr/lib/x86_64-linux-gnu/libc.so.6 /usr/local/lib/libc.so.6\n",
            "/usr/local/lib/libc.so.6 (added)",
        ),
        ("echo '# nothing' >> /usr/lib/x86_64-linux-gnu/libz.so.1\n", "libz.so.1"),
    ],
    ids=["preload", "shadowed-libc", "changed-library"],
)
async def test_under_enforce_libraries_the_verifier_loads_are_protected_too(
    engine: docker.DockerClient, tmp_path: Path, solve: str, named: str
) -> None:
    task = write_task(
        tmp_path / "tasks", "libraries", solve=solve, test="echo 1 > /logs/verifier/reward.txt\n"
    )
    result = await run_trial(task, "oracle", tmp_path, verifier_integrity="enforce")
    assert exception_type(result) == "SandboxTamperedError"
    assert named in result.exception_info.exception_message, result.exception_info.exception_message
    assert outcome(result) == "failed"


async def test_what_an_agent_adds_is_fine_under_record_and_recorded(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """What agents install by hand: new executables, libraries and folders, the loader's cache rebuilt
    (as every install of a library package does), and edits of their own files: fine under the default
    policy, as under Harbor (the tool chain's additions are recorded, nothing explains them)."""
    solve = """
        ldconfig && test -s /etc/ld.so.cache
        printf '#!/bin/sh\\necho mine\\n' > /usr/local/bin/my-tool && chmod +x /usr/local/bin/my-tool
        mkdir -p /usr/lib/my-package /usr/local/lib/python3/dist-packages/mine
        echo 'x = 1' > /usr/local/lib/python3/dist-packages/mine/__init__.py
        cp /usr/lib/x86_64-linux-gnu/libc.so.6 /usr/lib/my-package/libmine.so.1
        chmod 700 /usr/local/bin
        echo edited > /app/solution.txt && echo again >> /app/solution.txt
        rm -rf /var/cache/debconf /usr/share/doc/bash
    """
    task = write_task(
        tmp_path / "tasks",
        "adds",
        solve=solve,
        test="my-tool > /logs/verifier/out.txt\n"
        '[ "$(cat /logs/verifier/out.txt)" = mine ] && echo 1 > /logs/verifier/reward.txt\n',
    )
    result = await run_trial(task, "oracle", tmp_path)
    assert exception_type(result) is None, result.exception_info
    assert (rewards(result), outcome(result)) == ({"reward": 1}, "passed")


async def test_an_agent_that_deletes_the_shell_is_scored_by_the_verifier_and_the_deletion_recorded(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """The platform's own steps use its own shell: the image's /bin/sh gone, the verifier still runs and
    its verdict stands; the deletion is evidence (not unexplained: a removal runs nothing)."""
    task = write_task(
        tmp_path / "tasks", "no-sh", solve="rm -f /bin/sh\n", test="echo 1 > /logs/verifier/reward.txt\n"
    )
    result = await run_trial(task, "oracle", tmp_path)
    assert (exception_type(result), rewards(result), outcome(result)) == (None, {"reward": 1}, "passed")
    found = read_integrity_record(trial_dir(tmp_path, result))
    assert found is not None and found.unexplained == 0
    assert [(c.path, c.change) for c in found.changes] == [("/usr/bin/sh", "deleted")]
    assert containers_of(engine, result.trial_name) == []


async def test_a_fork_bomb_is_the_agents_failure(engine: docker.DockerClient, tmp_path: Path) -> None:
    """statistics.md §1: "once the agent phase has begun, a verifier that cannot run or conclude
    because of the sandbox's state (... no pids ...) scores the attempt `failed`"."""
    bomb = ":(){ :|:& };:\nexec sleep 1000\n"
    task = write_task(tmp_path / "tasks", "fork-bomb", solve=bomb, test=ALWAYS_FAILS, agent_timeout_sec=5)
    result = await run_trial(task, "oracle", tmp_path, max_processes=64)
    assert exception_type(result) == "AgentTimeoutError"
    assert outcome(result) == "failed"
    assert containers_of(engine, result.trial_name) == []


async def test_the_writable_layer_is_capped(engine: docker.DockerClient, tmp_path: Path) -> None:
    """storage_mb = 64 and 1 GiB written to /var/tmp: stopped near the cap, the attempt `failed`."""
    solve = "head -c 1G /dev/zero > /var/tmp/fill\necho $? > /logs/agent/fill-exit.txt\n"
    task = write_task(
        tmp_path / "tasks",
        "fill-layer",
        solve=solve,
        test="echo 1 > /logs/verifier/reward.txt\n",
        environment="storage_mb = 64\n",
    )
    result = await run_trial(task, "oracle", tmp_path)
    assert exception_type(result) == "StorageLimitExceededError", result.exception_info
    message = result.exception_info.exception_message
    found = re.fullmatch(r"storage limit exceeded \((\d+) MiB > 64 MiB\)", message)
    assert found, message
    # Measured over the cap and stopped before the 1 GiB was written (by how much it passes the cap
    # is what the agent writes between two measures: storage_cap.py).
    assert 64 < int(found.group(1)) < 1024, message
    assert not (trial_dir(tmp_path, result) / "agent" / "fill-exit.txt").exists(), "the write never finished"
    assert rewards(result) is None and outcome(result) == "failed"
    assert containers_of(engine, result.trial_name) == []


async def test_a_layer_over_the_cap_when_the_agent_ends_fails_the_attempt(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """A write quicker than the measures during the command is caught by the measure at the agent
    phase's end; a layer under the cap is fine."""
    solve = "head -c 100M /dev/zero > /var/tmp/fill\nhead -c 10M /dev/zero > /var/tmp/small\n"
    over = write_task(
        tmp_path / "tasks",
        "over",
        solve=solve,
        test="echo 1 > /logs/verifier/reward.txt\n",
        environment="storage_mb = 64\n",
    )
    under = write_task(
        tmp_path / "tasks",
        "under",
        solve="head -c 10M /dev/zero > /var/tmp/small\n",
        test="echo 1 > /logs/verifier/reward.txt\n",
        environment="storage_mb = 64\n",
    )
    result = await run_trial(over, "oracle", tmp_path)
    assert exception_type(result) == "StorageLimitExceededError", result.exception_info
    assert re.fullmatch(
        r"storage limit exceeded \(\d+ MiB > 64 MiB\)", result.exception_info.exception_message
    )
    assert outcome(result) == "failed"
    result = await run_trial(under, "oracle", tmp_path)
    assert (exception_type(result), outcome(result)) == (None, "passed")


async def test_a_later_agent_step_is_measured_again(engine: docker.DockerClient, tmp_path: Path) -> None:
    """A multi-step task: after one step's verifier, the next step's agent (Harbor wraps it in
    scoped_exec_env) is measured by the storage cap again."""
    task = write_task(tmp_path / "tasks", "steps", environment="storage_mb = 64\n")
    async with started_environment(tmp_path, task) as env:
        removed = await env.exec("rm -f -- /logs/verifier/reward.txt", user="root")  # step 1's verifier
        assert removed.return_code == 0
        with env.scoped_exec_env({"STEP": "2"}), pytest.raises(StorageLimitExceededError) as raised:
            await env.exec("head -c 200M /dev/zero > /var/tmp/fill; sleep 20")
    assert re.fullmatch(r"storage limit exceeded \(\d+ MiB > 64 MiB\)", str(raised.value))


@pytest.mark.parametrize(("policy", "shell"), [("enforce", "/.regatta/sh"), ("record", "bash")])
async def test_the_verifiers_commands_start_from_the_platform_shell_under_enforce(
    engine: docker.DockerClient, tmp_path: Path, policy: str, shell: str
) -> None:
    """Harbor runs the test as `(/tests/test.sh) > … 2>&1` through the environment's shell: under
    `enforce`, from the verifier's start (Harbor's removal of stale reward files) that shell is the
    platform's read-only busybox, never a program of the image the agent could replace; under `record`
    the image's bash, as Harbor's docker environment runs it. The agent's keep the image's bash."""
    async with started_environment(tmp_path, verifier_integrity=policy) as env:
        before = await env.exec('echo "$0"')
        removed = await env.exec("rm -f -- /logs/verifier/reward.txt /logs/verifier/reward.json", user="root")
        after = await env.exec('echo "$0"')
        with env.scoped_exec_env({"STEP": "2"}):  # a multi-step task's next agent step
            again = await env.exec('echo "$0"')
    assert (before.stdout, removed.return_code, after.stdout) == ("bash\n", 0, f"{shell}\n")
    assert again.stdout == "bash\n"


# The overshoot bound is what a starved executor lets through: measured off the parallel phase's load.
@pytest.mark.serial
async def test_fast_parallel_writers_are_stopped_near_the_cap(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """storage_mb = 64 and four writers of 1 GiB each: the layer grows fast, the measures come sooner
    (storage_cap.next_interval) and the container is killed with the layer under cap + 192 MiB (what
    is written between the last measure and the kill on a loaded 2-core host: storage_cap.py)."""
    task = write_task(tmp_path / "tasks", "parallel", environment="storage_mb = 64\n")
    fill = "for i in 1 2 3 4; do head -c 1G /dev/zero > /var/tmp/f$i & done; wait"
    async with started_environment(tmp_path, task) as env:
        with pytest.raises(StorageLimitExceededError) as raised:
            await env.exec(fill)
        await asyncio.sleep(1)  # whatever was in flight at the kill has landed
        # Measured as the cap measured it (the folder stays until the container is removed), rounded up
        # as its message rounds.
        upper = env._client.api.inspect_container(env._container_id)["GraphDriver"]["Data"]["UpperDir"]
        final = -(-HostLayer(upper).measure().bytes // 2**20)
    found = re.fullmatch(r"storage limit exceeded \((\d+) MiB > 64 MiB\)", str(raised.value))
    assert found and 64 < int(found.group(1)) <= final, (raised.value, final)
    assert final < 64 + 192, final


def test_measures_come_sooner_while_the_layer_grows_towards_the_cap() -> None:
    mib = 2**20
    assert next_interval(0.1, 0.001, 60 * mib, 0) == 0.1  # not growing: the usual interval
    assert next_interval(1.0, 0.5, 60 * mib, 0) == 5.0  # a costly measure: further apart
    assert next_interval(0.1, 0.001, 60 * mib, 100 * mib) == 0.1  # 0.6 s from the cap
    assert next_interval(0.1, 0.001, 10 * mib, 200 * mib) == pytest.approx(0.025)
    assert next_interval(1.0, 0.5, 10 * mib, 200 * mib) == pytest.approx(0.025)  # cost gives way
    assert next_interval(0.1, 0.001, 0, 200 * mib) == 0.01  # at the cap: back to back


async def test_the_listing_sees_a_change_that_keeps_size_mode_and_mtime(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """The check's listings (file_listing.py) on a real container: env rewritten with its own bytes
    and its mtime put back differs only by ctime, and is seen; a folder removed is named once; a path
    holding a line break and a fake record (folders make its slashes) stays one name; files the check
    does not protect are not listed."""
    from regatta_executor.container.integrity import file_listing

    async with started_environment(tmp_path) as env:
        assert env.image is not None
        image = file_listing.known(env.image.image_id)
        assert image is not None, "the image's files were listed at the start"
        assert "/usr/bin/env" in image.files and "/usr/lib/apt/methods/http" in image.files
        assert not any(path.startswith("/usr/share/doc/") for path in image.files)
        forged = "/usr/local/bin/x\n1 81ed 0 0 5 /usr/bin/bash"
        result = await env.exec(
            "cp -a /usr/bin/env /tmp/b && cat /tmp/b > /usr/bin/env && touch -r /tmp/b /usr/bin/env"
            " && rm -rf /usr/lib/apt/methods"
            " && f=\"$(printf '/usr/local/bin/x\\n1 81ed 0 0 5 /usr/bin/bash')\""
            ' && mkdir -p "${f%/bash}" && touch "$f"',
            user="root",
        )
        assert result.return_code == 0, result
        now = await asyncio.to_thread(file_listing.take, env._client.api, env._running(), image.scope)
    was, is_now = image.files["/usr/bin/env"], now.files["/usr/bin/env"]
    assert was[1:] == is_now[1:] and was[0] != is_now[0], (was, is_now)
    found = dict(file_listing.changes(image.files, now.files))
    assert found["/usr/bin/env"] == file_listing.MODIFIED
    assert found["/usr/lib/apt/methods"] == file_listing.DELETED
    assert "/usr/lib/apt/methods/http" not in found
    assert found[forged] == file_listing.ADDED


async def test_the_listing_holds_exactly_the_files_the_check_protects(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """The listing's find predicate and the check's rule (protected_paths.py) agree on real paths,
    glob characters and line breaks in names included."""
    from regatta_executor.container.integrity import file_listing

    names = [
        "/usr/bin/a", "/usr/local/sbin/b", "/libx/c", "/usr/libexec/d", "/usr/local/lib/e",
        "/opt/x/libz.so", "/opt/x/libz.so.1.2", "/opt/x/so", "/opt/x/a.sox", "/opt/x/a.so\nb",
        "/etc/ld.so.preload", "/etc/ld.so.conf.d/z.conf", "/etc/ld.so.confx", "/etc/passwdx",
        "/etc/ld.so.cache", "/usr/share/f", "/usr/lib-not", "/usr/binx/g", "/srv/*/h", "/srv/[a]/i", "/app/j",
        "/root/.local/lib/python3.11/site-packages/hook.pth", "/root/.localx/k",
    ]  # fmt: skip
    async with started_environment(tmp_path) as env:
        assert env.image is not None
        image = file_listing.known(env.image.image_id)
        assert image is not None
        # A PATH with glob characters in it: "/srv/*" must not make /srv/[a] protected.
        scope = type(image.scope)((*image.scope.path, "/srv/*"))
        made = " && ".join(
            f'f="$(printf %b {shlex.quote(name)})" && mkdir -p "$(dirname "$f")" && touch "$f"'
            for name in names
        )
        result = await env.exec(made, user="root")
        assert result.return_code == 0, result
        listed = await asyncio.to_thread(file_listing.take, env._client.api, env._running(), scope)
    created = {name.replace("\\n", "\n") for name in names}
    expected = {name for name in created if scope.covers(name)}
    assert {name for name in listed.files if name in created} == expected
    assert "/srv/*/h" in expected and "/srv/[a]/i" not in expected  # the rule itself, as a check
    # The loader's cache and root's Python user site are the verifier's tool chain too.
    assert {"/etc/ld.so.cache", "/root/.local/lib/python3.11/site-packages/hook.pth"} <= expected
    assert {
        "/usr/share/f",
        "/app/j",
        "/usr/binx/g",
        "/etc/passwdx",
        "/opt/x/so",
        "/root/.localx/k",
    }.isdisjoint(expected)


async def test_the_digest_of_an_untouched_container_matches_and_a_protected_change_breaks_it(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """What the exec that ends the agent's processes prints (file_listing.digest_command): the
    image's digest while only unprotected files changed, another once a protected one did."""
    from regatta_executor.container.exec import processes
    from regatta_executor.container.integrity import file_listing

    async with started_environment(tmp_path) as env:
        assert env.image is not None
        image = file_listing.known(env.image.image_id)
        assert image is not None
        api, container = env._client.api, env._running()

        async def digest() -> str:
            return (await processes.end_agent_turn(api, container, then=file_listing.digest_command(image)))[
                0
            ]

        assert file_listing.unchanged(image, await digest())
        result = await env.exec("echo x > /app/x && rm -rf /usr/share/doc && touch /tmp/y.txt", user="root")
        assert result.return_code == 0, result
        assert file_listing.unchanged(image, await digest())
        result = await env.exec("chmod 700 /usr/bin/env", user="root")
        assert result.return_code == 0, result
        printed = await digest()
        assert printed.startswith("regatta-listing-sha256 ") and not file_listing.unchanged(image, printed)
    assert not file_listing.unchanged(image, "x" + f"regatta-listing-sha256 {image.digest}\n")


# Each a change the digest sees (what the image has first, then the change), made where the quick test
# must see it too: a file's mode, a file added to a PATH folder, a library deleted, a loader file the
# image lacks created, a root folder of the image deleted, and a protected file outside the roots (one
# the digest names) deleted.
GDB_SCRIPT = "/usr/share/gdb/auto-load/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30-gdb.py"
PROTECTED_CHANGES = [
    "test -f /usr/bin/env && chmod 700 /usr/bin/env",
    "test ! -e /usr/local/bin/new-tool && touch /usr/local/bin/new-tool",
    "ls /usr/lib/x86_64-linux-gnu/libz.so.1* && rm /usr/lib/x86_64-linux-gnu/libz.so.1*",
    "test ! -e /etc/ld.so.preload && touch /etc/ld.so.preload",
    "test -d /usr/local/sbin && rmdir /usr/local/sbin",
    f"test -f {GDB_SCRIPT} && rm {GDB_SCRIPT}",
]


@pytest.mark.parametrize("change", PROTECTED_CHANGES)
async def test_the_quick_untouched_test_sees_every_change_the_digest_covers(
    engine: docker.DockerClient, tmp_path: Path, change: str
) -> None:
    """file_listing._untouched_test, which lets the exec that ends the agent's turn print the image's
    digest line without walking the records: it holds in an untouched container and after changes
    outside what the check protects, and fails after any protected change (so the full digest then
    decides, and differs)."""
    from regatta_executor.container.exec import processes
    from regatta_executor.container.integrity import file_listing

    async with started_environment(tmp_path) as env:
        assert env.image is not None
        image = file_listing.known(env.image.image_id)
        assert image is not None and image.digest is not None and image.digest.present is not None
        untouched = file_listing._untouched_test(image.digest)
        assert untouched is not None
        api, container = env._client.api, env._running()

        async def holds() -> bool:
            printed, _, _ = await processes.end_agent_turn(
                api, container, then=f"if {untouched}; then echo holds; else echo fails; fi"
            )
            assert printed in ("holds\n", "fails\n"), printed
            return printed == "holds\n"

        assert await holds()
        result = await env.exec("echo x > /app/x && rm -rf /usr/share/doc && touch /tmp/y.txt", user="root")
        assert result.return_code == 0, result
        assert await holds()
        result = await env.exec(change, user="root")
        assert result.return_code == 0, result
        assert not await holds()
        printed = (await processes.end_agent_turn(api, container, then=file_listing.digest_command(image)))[0]
        assert printed.startswith("regatta-listing-sha256 ") and not file_listing.unchanged(image, printed)
