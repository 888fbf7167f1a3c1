"""Git sources: a repository pinned to a commit, read with Harbor's own git registry and task clients.

The ref (branch, tag, short or full SHA; default HEAD) is resolved to one commit SHA before anything is
read, so every file of one sync comes from that commit and the commit is recorded with the version.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

from harbor.models.task.id import GitTaskId
from harbor.registry.client.git_repo import GitRepoRegistryClient, ResolvedRepo
from harbor.tasks.client import TaskClient
from harbor.utils.git import select_ls_remote_sha
from pydantic import ValidationError
from regatta_shared.events import BenchmarkSource
from regatta_shared.rules.ceilings import TaskFileBounds
from regatta_shared.security.git_values import (
    GitValueInvalid,
    check_commit,
    check_ref,
    check_repo_path,
    git_environment,
    is_commit_id,
    url_kind,
)
from regatta_shared.security.outbound import TIMED_OUT, UNREACHABLE, OutboundRefused, resolve, url_endpoint
from regatta_shared.security.source_policy import SourcePolicy, SourceRefused, local_path_of

from .dataset import Dataset, SourceInvalid, TaskLocation
from .git_bounds import GitTask, bound_git_tasks, bound_paths, pattern_problem
from .git_scratch import GitFailed, GitTooLarge, Scratch
from .git_scratch import remove as remove_scratch
from .manifest import MANIFEST_NAME, ManifestFile

GIT_TIMEOUT_SEC = 600.0
# registry.json and regatta.toml as Harbor's sparse checkout writes them (every file the pattern matches).
MAX_METADATA_BYTES = 32 * 1024 * 1024


def git_url_of(location: str) -> str:
    """A local repository path becomes a file:// URL: Harbor's shallow fetch by SHA needs a transport."""
    return f"file://{Path(location).resolve()}" if location.startswith("/") else location


def check_git_url(git_url: str, field: str, policy: SourcePolicy, *, trusted: bool) -> str:
    """The URL git may be given: https/ssh to an allowed address, or a local repository the source
    policy allows. Resolving here and git's own lookup are two lookups: the allow-list decides once more
    for each process, but a name that changes its answer in between is out of our hands for git."""
    try:
        kind = url_kind(git_url, field)
    except GitValueInvalid as error:
        raise SourceInvalid(str(error)) from None
    try:
        if kind == "local":
            policy.check_host_path(local_path_of(git_url) or "/", field, trusted=trusted)
        elif kind == "https" or git_url.lower().startswith("ssh://"):
            host, port = url_endpoint(git_url, field, ("https", "ssh"))
            resolve(host, port, field, policy.outbound)
        else:
            host = git_url.split("@", 1)[1].split(":", 1)[0]
            resolve(host, 22, field, policy.outbound)
    except (SourceRefused, OutboundRefused) as error:
        raise SourceInvalid(str(error)) from None
    _pin_git_environment()
    return git_url_of(git_url)


def _pin_git_environment() -> None:
    # Harbor's git clients spawn git with this process's environment: restrict its transports there.
    os.environ.update(git_environment({}))


def checked_task_id(
    git_url: str, commit: object, path: object, where: str, policy: SourcePolicy, *, trusted: bool
) -> GitTaskId:
    """A registry task's git coordinates, each checked for its kind (they come from the registry's JSON)."""
    try:
        url = check_git_url(git_url, f"{where}.git_url", policy, trusted=trusted)
        commit_id = check_commit(commit, f"{where}.git_commit_id")
        repo_path = check_repo_path(path, f"{where}.path")
        return GitTaskId(git_url=url, git_commit_id=commit_id, path=Path(repo_path))
    except (GitValueInvalid, ValueError) as error:
        raise SourceInvalid(str(error).splitlines()[0]) from None


async def open_git(
    source: BenchmarkSource, workdir: Path, policy: SourcePolicy, bounds: TaskFileBounds
) -> Dataset:
    git_url = check_git_url(source.git_url or source.ref, "git_url", policy, trusted=source.trusted)
    try:
        if source.git_ref is not None:
            check_ref(source.git_ref, "git_ref")
        for field, value in (("subdir", source.subdir), ("registry_path", source.registry_path)):
            if value is not None:
                check_repo_path(value, field)
    except GitValueInvalid as error:
        raise SourceInvalid(str(error)) from None
    sha = await resolve_ref(git_url, source.git_ref)
    label = f"git repository {git_url} at {sha[:12]}"
    subdir = Path(source.subdir) if source.subdir else None
    registry = Path(source.registry_path) if source.registry_path else None
    client = GitRepoRegistryClient(_repo(git_url, source.git_ref, sha), path=subdir, registry_path=registry)
    wanted = f"{source.dataset}@{source.version}" if source.dataset and source.version else source.dataset
    manifest_dir = (
        (registry.parent if registry and registry.suffix == ".json" else registry) if wanted else None
    )
    candidates = _manifest_candidates(
        manifest_dir, subdir or Path("tasks"), source.dataset if wanted else None
    )
    uses_registry = registry is not None or bool(wanted and "/" not in (wanted or "").split("@")[0])
    await _bound_metadata_files(
        git_url, sha, workdir, label, candidates, _registry_rel(registry) if uses_registry else None
    )
    try:
        async with asyncio.timeout(GIT_TIMEOUT_SEC):
            metadata = await client.get_dataset_metadata(wanted or "")
    except subprocess.CalledProcessError as error:
        raise SourceInvalid(f"{label}: git failed ({_why(error, git_url)})") from None
    except ValidationError as error:
        raise SourceInvalid(f"{label}: registry.json is malformed ({_first(error)})") from None
    except ValueError as error:
        raise SourceInvalid(f"{label}: {error}") from None
    except TimeoutError:
        raise SourceInvalid(f"{label}: git did not answer within {GIT_TIMEOUT_SEC:.0f} s") from None
    task_ids = [t for t in metadata.task_ids if isinstance(t, GitTaskId)]
    # A registry.json inside the repository names git URLs, commits and paths of its own: each is
    # checked as a user's would be, and bounded before Harbor checks it out.
    tasks = await fetch_git_tasks(
        [(t.path.name, t) for t in task_ids], workdir, bounds, policy, trusted=source.trusted
    )
    return Dataset(
        name=metadata.name if wanted else f"{_repo_name(git_url)}/{(subdir or Path('tasks')).as_posix()}",
        version=metadata.version if wanted else sha[:12],
        tasks=tasks,
        description=metadata.description or None,
        manifest=await _read_manifest(client, sha, candidates, label, git_url),
        commit=sha,
    )


async def resolve_ref(git_url: str, ref: str | None) -> str:
    wanted = ref or "HEAD"
    if is_commit_id(wanted):
        return wanted.lower()
    local = git_url.startswith("file://")
    try:
        if local:
            # A local repository also resolves short SHAs and commits no ref points at.
            path = urlsplit(git_url).path
            return await _git(
                "git", "-C", path, "rev-parse", "--verify", "--end-of-options", f"{wanted}^{{commit}}"
            )
        output = await _git("git", "ls-remote", "--", git_url, wanted, f"{wanted}^{{}}")
    except subprocess.CalledProcessError as error:
        if local and _is_repository(urlsplit(git_url).path):
            raise SourceInvalid(f"git repository {git_url}: ref {wanted!r} does not exist") from None
        if local:
            raise SourceInvalid(f"git repository {git_url} is unreachable ({_stderr(error)})") from None
        # git's own words would tell a closed port from an open one, and echo the remote's answer.
        raise SourceInvalid(f"could not fetch git_url: {UNREACHABLE}") from None
    except TimeoutError:
        raise SourceInvalid(f"could not fetch git_url: {TIMED_OUT}") from None
    if not output:
        raise SourceInvalid(f"git repository {git_url}: ref {wanted!r} does not exist")
    sha = select_ls_remote_sha(output, wanted)
    # An annotated tag names a tag object; the commit is on its peeled `^{}` line.
    by_name: dict[str, str] = {}
    for line in output.splitlines():
        value, _, name = line.partition("\t")
        by_name[name] = value
    refname = next((name for name, value in by_name.items() if value == sha), "")
    return by_name.get(f"{refname}^{{}}", sha)


async def fetch_git_tasks(
    tasks: list[tuple[str, GitTaskId]],
    workdir: Path,
    bounds: TaskFileBounds,
    policy: SourcePolicy,
    *,
    trusted: bool,
) -> list[TaskLocation]:
    """Each task's URL, commit and path checked for its kind and the policy, its files bounded as Harbor
    would check them out (git_bounds), then Harbor's sparse, shallow fetch of the tasks that pass, at
    the commit measured: one clone per repository and commit, so no commit's checkout expands a path
    that was measured at another. A refused task is listed with its reason and never checked out."""
    urls: dict[str, str] = {}
    checked = []
    for name, t in tasks:
        where = f"task {name!r}"
        url = t.git_url or ""
        if url not in urls:
            # One check (and one lookup) per repository, however many tasks it holds.
            urls[url] = checked_task_id(url, None, t.path.as_posix(), where, policy, trusted=trusted).git_url
        try:
            commit = check_commit(t.git_commit_id, f"{where}.git_commit_id")
            path = check_repo_path(t.path.as_posix(), f"{where}.path")
        except GitValueInvalid as error:
            raise SourceInvalid(str(error)) from None
        checked.append(GitTask(name, GitTaskId(git_url=urls[url], git_commit_id=commit, path=Path(path))))
    try:
        outcomes = await bound_git_tasks(checked, workdir, bounds)
    except (GitTooLarge, GitFailed) as error:
        raise SourceInvalid(str(error)) from None
    groups: dict[tuple[str, str], list[int]] = {}
    for index, outcome in enumerate(outcomes):
        if isinstance(outcome, GitTaskId):
            groups.setdefault((outcome.git_url or "", outcome.git_commit_id or ""), []).append(index)
    paths: dict[int, Path] = {}
    for (url, commit), indexes in groups.items():
        pinned = [outcomes[i] for i in indexes]
        try:
            async with asyncio.timeout(GIT_TIMEOUT_SEC):
                result = await TaskClient().download_tasks(pinned, output_dir=workdir / "git")  # type: ignore[arg-type]
        except subprocess.CalledProcessError as error:
            raise SourceInvalid(
                f"git repository {url}: cannot fetch commit {commit} ({_why(error, url)})"
            ) from None
        except TimeoutError:
            raise SourceInvalid(f"git fetch did not finish within {GIT_TIMEOUT_SEC:.0f} s") from None
        except (OSError, ValueError) as error:
            raise SourceInvalid(f"git task fetch failed: {error}") from None
        paths.update(zip(indexes, result.paths, strict=True))
    return [
        TaskLocation(name=task.name, path=paths[index])
        if index in paths
        else TaskLocation(name=task.name, path=workdir / "refused", refused=str(outcomes[index]))
        for index, task in enumerate(checked)
    ]


async def _bound_metadata_files(
    git_url: str, sha: str, workdir: Path, label: str, manifests: list[str], registry: str | None
) -> None:
    """registry.json and the manifest candidates, as Harbor's sparse checkouts of them would write them,
    within MAX_METADATA_BYTES; the trees of the default branch and the commit within their cap."""
    named = [("registry_path", registry)] if registry else []
    for field, pattern in [*named, *(("dataset", m) for m in manifests)]:
        problem = pattern_problem(pattern or "")
        if problem:
            raise SourceInvalid(f"{field} {problem}")
    scratch = Scratch(git_url, workdir / "git-metadata")
    try:
        await scratch.create()
        await scratch.commit(None, label)
        commit = await scratch.commit(sha, label)
        if registry:
            await bound_paths(scratch, commit, [registry], MAX_METADATA_BYTES, f"{label}: {registry}")
        await bound_paths(scratch, commit, manifests, MAX_METADATA_BYTES, f"{label}: {MANIFEST_NAME}")
    except (GitTooLarge, GitFailed) as error:
        raise SourceInvalid(str(error)) from None
    finally:
        await asyncio.to_thread(remove_scratch, scratch.folder)


def _registry_rel(registry: Path | None) -> str:
    """The path Harbor's git registry client checks registry.json out from."""
    if registry is None:
        return "registry.json"
    return registry.as_posix() if registry.suffix == ".json" else (registry / "registry.json").as_posix()


def _repo(git_url: str, ref: str | None, sha: str) -> ResolvedRepo:
    parts = [p for p in urlsplit(git_url).path.split("/") if p] or ["repo"]
    org = parts[-2] if len(parts) > 1 else "local"
    return ResolvedRepo(
        host=urlsplit(git_url).hostname or "local",
        org=org,
        name=parts[-1].removesuffix(".git"),
        git_url=git_url,
        ref=ref,
        resolved_sha=sha,
    )


def _repo_name(git_url: str) -> str:
    return _repo(git_url, None, "").name


def _manifest_candidates(registry_dir: Path | None, subdir: Path, dataset: str | None) -> list[str]:
    if dataset is not None:
        base = registry_dir or Path(".")
        return [(base / f"regatta.{dataset}.toml").as_posix(), (base / MANIFEST_NAME).as_posix()]
    return [(subdir / MANIFEST_NAME).as_posix(), MANIFEST_NAME]


async def _read_manifest(
    client: GitRepoRegistryClient, sha: str, candidates: list[str], label: str, git_url: str
) -> ManifestFile | None:
    try:
        async with asyncio.timeout(GIT_TIMEOUT_SEC), client._sparse_checkout(candidates, sha) as repo_dir:
            for candidate in candidates:
                path = Path(repo_dir) / candidate
                if path.is_file():
                    text = await asyncio.to_thread(path.read_text)
                    return ManifestFile(label=f"{candidate} ({label})", text=text)
    except subprocess.CalledProcessError as error:
        raise SourceInvalid(f"{label}: git failed ({_why(error, git_url)})") from None
    except UnicodeDecodeError:
        raise SourceInvalid(f"{label}: {MANIFEST_NAME} is not UTF-8 text") from None
    return None


async def _git(*args: str) -> str:
    env = git_environment(dict(os.environ))
    process = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    try:
        async with asyncio.timeout(GIT_TIMEOUT_SEC):
            stdout, stderr = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    if process.returncode:
        raise subprocess.CalledProcessError(process.returncode, list(args), stdout, stderr)
    return stdout.decode().strip()


def _is_repository(path: str) -> bool:
    return Path(path, ".git").exists() or Path(path, "HEAD").is_file()


def _why(error: subprocess.CalledProcessError, *git_urls: str) -> str:
    """git's stderr for local repositories; for a remote only the reason class: its stderr is the
    remote's own words and tells an open port from a closed one."""
    return _stderr(error) if all(u.startswith("file://") for u in git_urls) else UNREACHABLE


def _stderr(error: subprocess.CalledProcessError) -> str:
    raw = (
        error.stderr.decode(errors="replace") if isinstance(error.stderr, bytes) else str(error.stderr or "")
    )
    lines = [line.strip() for line in raw.splitlines() if line.strip() and not line.startswith("warning:")]
    return "; ".join(lines[:2]) or f"exit status {error.returncode}"


def _first(error: ValidationError) -> str:
    first = error.errors()[0]
    return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
