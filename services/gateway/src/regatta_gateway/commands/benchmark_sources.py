"""The source of a benchmark to add, read from the request body and checked field by field.

Git URLs, refs and paths end up as git command arguments in registry-sync, so their shapes are
restricted here (no leading '-', no '..', https/ssh or a local path only): bad input changes nothing. Paths on
the registry-sync host (a folder, a registry.json, a local git repository) must be absolute and name
exactly what they say: no '.'/'..' segments, no percent-encoded characters, no NUL or control characters.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError
from regatta_shared.events import BenchmarkMetadata, BenchmarkSource
from regatta_shared.rules.harnesses import HARNESSES
from regatta_shared.security.git_values import GitValueInvalid, check_ref, url_kind

from regatta_gateway.errors import Invalid

KINDS = ("registry", "folder", "git", "hub")
GIT_REF = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/+-]*$")
HUB_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")
HUB_REF = re.compile(r"^[a-z0-9][a-z0-9.-]*$|^sha256:[0-9a-f]{64}$")
REPO_PATH = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9._/-]*$")
# %2e, %2f, %5c, %00...: nothing on disk is named like that on purpose, and a later decode would
# turn it into a traversal.
ENCODED = re.compile(r"%[0-9A-Fa-f]{2}")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_DATASET = 300


def parse_source(body: dict[str, Any]) -> BenchmarkSource:
    kind = body.get("source_type") or _infer(body)
    if kind not in KINDS:
        supported = ", ".join(KINDS)
        raise Invalid(f"source_type {kind!r} is not supported (use {supported})", field="source_type")
    metadata = _metadata(body.get("metadata"))
    if kind == "registry":
        return _registry(body, metadata)
    if kind == "folder":
        field = "path" if _text(body, "path") else "source_ref"
        path = _text(body, field)
        if not path:
            raise Invalid("path is required for a folder source", field="path")
        return BenchmarkSource(type="folder", ref=host_path(path, field), metadata=metadata)
    if kind == "git":
        return _git(body, metadata)
    return _hub(body, metadata)


def _infer(body: dict[str, Any]) -> str:
    if body.get("repo") or body.get("git_url"):
        return "git"
    if body.get("path"):
        return "folder"
    dataset = body.get("dataset") or body.get("source_ref")
    registry = body.get("registry_path") or body.get("registry_url") or body.get("registry")
    # Harbor's rule: a dataset name with '/' is a hub package.
    if not registry and isinstance(dataset, str) and "/" in dataset.partition("@")[0]:
        return "hub"
    return "registry"


def _registry(body: dict[str, Any], metadata: dict[str, Any] | None) -> BenchmarkSource:
    field = next(
        (k for k in ("registry_url", "registry_path", "registry") if _text(body, k)), "registry_path"
    )
    registry = _text(body, field)
    dataset = _text(body, "dataset") or _text(body, "source_ref")
    if not dataset:
        raise Invalid("dataset (name[@version]) is required", field="dataset")
    name, _, version = dataset.partition("@")
    if not name.strip() or len(dataset) > MAX_DATASET or CONTROL.search(dataset):
        raise Invalid(f"dataset must be name[@version], at most {MAX_DATASET} characters", field="dataset")
    if not registry:
        # No registry named: the default registry's (admission.default_registry fills it in).
        return BenchmarkSource(
            type="registry",
            ref=dataset,
            dataset=name.strip(),
            version=version.strip() or None,
            metadata=metadata,
        )
    url = registry if registry.startswith(("http://", "https://")) else None
    if "://" in registry and url is None:
        raise Invalid("registry_url must be an http(s) URL", field="registry_url")
    if url is None:
        registry = host_path(registry, field)
    return BenchmarkSource(
        type="registry",
        ref=dataset,
        registry_path=None if url else registry,
        registry_url=url,
        dataset=name.strip(),
        version=version.strip() or None,
        metadata=metadata,
    )


def _git(body: dict[str, Any], metadata: dict[str, Any] | None) -> BenchmarkSource:
    location = _text(body, "repo") or _text(body, "git_url") or _text(body, "source_ref")
    if not location:
        raise Invalid("repo (a git URL or an absolute local path) is required", field="repo")
    url, ref = _split_ref(location)
    ref = _text(body, "ref") or _text(body, "git_ref") or ref
    try:
        url_kind(url, "repo")
    except GitValueInvalid as error:
        raise Invalid(f"{error} or an absolute path", field="repo") from None
    if url.startswith("/"):
        host_path(url, "repo")
    if ref is not None and (not GIT_REF.match(ref) or ".." in ref or not _git_ref(ref)):
        raise Invalid("ref must be a branch, tag or commit SHA", field="ref")
    subdir = _text(body, "path") or _text(body, "subdir")
    registry_path = _text(body, "registry_path")
    for field, value in (("path", subdir), ("registry_path", registry_path)):
        if value is not None and (not REPO_PATH.match(value) or ".." in value.split("/")):
            raise Invalid(f"{field} must be a relative path inside the repository", field=field)
    dataset = _text(body, "dataset")
    if registry_path and not dataset:
        raise Invalid("dataset is required with registry_path", field="dataset")
    name, _, version = (dataset or "").partition("@")
    return BenchmarkSource(
        type="git",
        ref=f"{url}@{ref}" if ref else url,
        git_url=url,
        git_ref=ref,
        subdir=subdir,
        registry_path=registry_path,
        dataset=name.strip() or None,
        version=version.strip() or None,
        metadata=metadata,
    )


def _git_ref(ref: str) -> bool:
    try:
        check_ref(ref, "ref")
    except GitValueInvalid:
        return False
    return True


def _hub(body: dict[str, Any], metadata: dict[str, Any] | None) -> BenchmarkSource:
    dataset = _text(body, "dataset") or _text(body, "source_ref")
    if not dataset:
        raise Invalid("dataset (org/name[@ref]) is required for a hub source", field="dataset")
    name, _, ref = dataset.partition("@")
    if not HUB_NAME.match(name) or ".." in name:
        raise Invalid("dataset must be org/name[@ref]", field="dataset")
    if ref and not (ref.isdigit() or HUB_REF.match(ref)):
        raise Invalid("the ref must be a tag, a revision number or sha256:<64 hex>", field="dataset")
    return BenchmarkSource(type="hub", ref=dataset, dataset=name, version=ref or None, metadata=metadata)


def host_path(path: str, field: str) -> str:
    """An absolute path on the registry-sync host that names exactly what it says, or 400 naming `field`."""
    problem = None
    if CONTROL.search(path):
        problem = "must not contain NUL or control characters"
    elif ENCODED.search(path) or "\\" in path:
        problem = "must not contain percent-encoded characters or backslashes"
    elif not path.startswith("/"):
        problem = "must be an absolute path"
    elif any(part in (".", "..") for part in path.split("/")):
        problem = "must not contain '.' or '..' segments"
    if problem:
        raise Invalid(f"{field} {problem}", code="VALIDATION", field=field)
    return path


def _split_ref(location: str) -> tuple[str, str | None]:
    """`url@ref` as Harbor's --repo parses it: the last '@' whose tail has no '/' or ':'."""
    at = location.rfind("@")
    tail = location[at + 1 :]
    if at <= 0 or not tail or "/" in tail or ":" in tail:
        return location, None
    return location[:at], tail


def _metadata(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise Invalid("metadata must be an object", field="metadata")
    try:
        BenchmarkMetadata.model_validate(value)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise Invalid(f"metadata.{where}: {first['msg']}", field=f"metadata.{where}") from None
    harness = value.get("default_harness")
    if harness is not None and harness not in HARNESSES:
        raise Invalid(
            f"metadata.default_harness: unknown harness {harness!r}", field="metadata.default_harness"
        )
    return value


def _text(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    return value.strip() if isinstance(value, str) and value.strip() else None
