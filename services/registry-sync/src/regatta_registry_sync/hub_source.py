"""Harbor hub package datasets (`org/name@ref`), read with Harbor's own registry, task and storage clients.

The ref (tag, revision or sha256 digest; default `latest`) is resolved once to the dataset version's
digest, and everything after reads that digest, so a tag moved mid-sync cannot mix two versions. The
hub's task and dataset digests are verified against the downloaded content (sync.py).
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import harbor.auth.client
from harbor.db.client import RegistryDB
from harbor.models.package.reference import PackageReference
from harbor.models.task.id import PackageTaskId
from harbor.registry.client.base import UnavailableDatasetTasksError
from harbor.registry.client.package import PackageDatasetClient
from regatta_shared.events import BenchmarkSource
from regatta_shared.rules.ceilings import TaskFileBounds
from regatta_shared.security.answers import AnswerRefused
from regatta_shared.security.outbound import OutboundRefused, check_url
from regatta_shared.security.source_policy import SourcePolicy
from regatta_shared.security.task_archives import TaskArchiveRefused

from . import hub_archives
from .dataset import Dataset, SourceInvalid, TaskLocation
from .hub_client import bounded_hub_client
from .manifest import MANIFEST_NAME, ManifestFile

HUB_TIMEOUT_SEC = 600.0


async def open_hub(
    source: BenchmarkSource, workdir: Path, policy: SourcePolicy, bounds: TaskFileBounds
) -> Dataset:
    # Harbor's task client extracts each archive it downloads: walked under the bounds first.
    hub_archives.install(bounds)
    try:
        # The hub is the deployment's choice, but an internal one must be named in the allow-list too.
        await asyncio.to_thread(check_url, harbor.auth.client.SUPABASE_URL, "hub", policy.outbound)
    except OutboundRefused as error:
        raise SourceInvalid(str(error)) from None
    text = f"{source.dataset}@{source.version}" if source.dataset and source.version else source.ref
    try:
        ref = PackageReference.parse(text)
    except ValueError as error:
        raise SourceInvalid(f"hub dataset {text!r}: {_first_line(error)}") from None
    label = f"hub dataset {ref}"
    try:
        async with asyncio.timeout(HUB_TIMEOUT_SEC), bounded_hub_client(policy, bounds, HUB_TIMEOUT_SEC):
            _package, row = await RegistryDB().resolve_dataset_version(ref.org, ref.short_name, ref.ref)
            digest = str(row["content_hash"]).removeprefix("sha256:")
            client = PackageDatasetClient()
            metadata = await client.get_dataset_metadata(f"{ref.name}@sha256:{digest}")
            task_ids = [t for t in metadata.task_ids if isinstance(t, PackageTaskId)]
            result = await client._task_client.download_tasks(list(task_ids), output_dir=workdir / "hub")
            files = await client.download_dataset_files(metadata, output_dir=workdir / "files")
    except UnavailableDatasetTasksError as error:
        raise SourceInvalid(f"{label}: {error}") from None
    except TimeoutError:
        raise SourceInvalid(f"{label}: the hub did not answer within {HUB_TIMEOUT_SEC:.0f} s") from None
    except Exception as error:
        refused = _refusal(error)
        if refused is not None:
            raise SourceInvalid(f"{label}: {refused}") from None
        raise SourceInvalid(f"{label}: {type(error).__name__}: {_first_line(error)}") from None
    file_digests = await asyncio.to_thread(_file_digests, files)
    manifest_path = files.get(MANIFEST_NAME)
    manifest = None
    if manifest_path is not None:
        manifest_text = await asyncio.to_thread(manifest_path.read_text)
        manifest = ManifestFile(label=f"{MANIFEST_NAME} of {label}", text=manifest_text)
    revision = row.get("revision")
    return Dataset(
        name=ref.name,
        version=str(revision) if revision is not None else f"sha256:{digest[:12]}",
        tasks=[
            TaskLocation(name=f"{t.org}/{t.name}", path=path, expected_digest=t.ref)
            for t, path in zip(task_ids, result.paths, strict=True)
        ],
        description=metadata.description or None,
        manifest=manifest,
        files=file_digests,
        expected_digest=f"sha256:{digest}",
    )


def _file_digests(files: dict[str, Path]) -> dict[str, str]:
    return {name: "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest() for name, path in files.items()}


def _refusal(error: BaseException) -> TaskArchiveRefused | AnswerRefused | None:
    """A bounds refusal (of an archive or of an answer), also from inside the exception groups of
    Harbor's concurrent downloads."""
    if isinstance(error, TaskArchiveRefused | AnswerRefused):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _refusal(inner)
            if found is not None:
                return found
    return None


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else repr(error)
