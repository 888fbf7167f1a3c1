"""Run downloads (contract §4.8-4.10): the manifest, signed URLs, and the files behind them.

Layout: summary.csv, results.csv, logs.txt and artifacts/<task>/agent-<a>-attempt-<n>/<file>. Every
file is rebuilt from the run stream up to the version the manifest pinned (its `token`), so sizes
match the bytes served even while the run goes on. Artifact bytes live in the object store by digest.

A download URL is self-authorising: an HMAC over (run, path, version, expiry) with a subkey of the
master key. It opens that one file of that one run until it expires, and nothing else.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from regatta_shared.eventstore import EventStore
from regatta_shared.ids import run_stream
from regatta_shared.runs.status import NOT_STARTED

from regatta_gateway.errors import Conflict, Forbidden, Invalid, NotFound
from regatta_gateway.principals import Scope
from regatta_gateway.queries.benchmarks import find_run
from regatta_gateway.queries.exports import logs_txt, results_csv, summary_csv
from regatta_gateway.queries.run_snapshot import RunSnapshot, load_snapshot

TYPES = ("summary", "results", "artifacts", "logs")
DEFAULT_TYPES = ("summary", "results")
URL_TTL_SECONDS = 900
MAX_URL_ITEMS = 500
DOWNLOAD_PREFIX = "/api/downloads/runs"
MAX_PATH_LENGTH = 1024
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
ENCODED = re.compile(r"%[0-9A-Fa-f]{2}")


@dataclass(frozen=True)
class OutputFile:
    path: str
    type: str
    size: int
    content: bytes | None = None  # generated files
    digest: str | None = None  # artifacts, fetched from the object store


def parse_types(raw: str | None) -> list[str]:
    if raw is None or not raw.strip():
        return list(DEFAULT_TYPES)
    wanted = [part.strip().lower() for part in raw.split(",")]
    if "all" in wanted:
        return list(TYPES)
    unknown = [w for w in wanted if w not in TYPES]
    if unknown or not wanted:
        raise Invalid(f"types must be a comma list of {', '.join(TYPES)}", code="VALIDATION", field="types")
    return [t for t in TYPES if t in wanted]


GENERATED = {"summary.csv": "summary", "results.csv": "results", "logs.txt": "logs"}


def safe_path(path: str, field: str) -> str:
    """A path as the manifest writes them (relative, '/'-separated, no '.'/'..'/empty segments), or 400.

    Outputs are looked up by exact path among the run's files, never on a file system, so a hostile
    path could only ever miss; it is refused anyway, naming the field, so the client learns why.
    """
    if (
        not path
        or len(path) > MAX_PATH_LENGTH
        or CONTROL.search(path)
        or "\\" in path
        or ENCODED.search(path)
        or any(part in ("", ".", "..") for part in path.split("/"))
    ):
        raise Invalid(
            f"{field} must be a relative output path: no leading '/', no '.', '..' or empty segments, "
            "no backslashes, percent-encoding or control characters",
            code="VALIDATION",
            field=field,
        )
    return path


def type_of(path: str) -> str:
    return GENERATED.get(path) or "artifacts"


def _segment(text: str) -> str:
    # '%' too: output paths never carry percent-encoding, so one that does is refused (safe_path).
    cleaned = text.replace("/", "_").replace("\\", "_").replace("%", "_").strip()
    return cleaned if cleaned not in ("", ".", "..") else "_"


def files_of(snapshot: RunSnapshot, types: list[str]) -> list[OutputFile]:
    files: list[OutputFile] = []
    generated = {
        "summary": (
            "summary.csv",
            lambda: summary_csv(snapshot.submission, snapshot.scores, snapshot.scores_final),
        ),
        "results": ("results.csv", lambda: results_csv(snapshot.submission, snapshot.attempt_rows())),
        "logs": ("logs.txt", lambda: logs_txt(snapshot.logs)),
    }
    for kind in ("summary", "results", "logs"):
        if kind in types:
            path, build = generated[kind]
            content = build().encode()
            files.append(OutputFile(path, kind, len(content), content=content))
    if "artifacts" in types:
        seen: set[str] = set()
        for attempt in snapshot.attempt_rows():
            result = attempt.get("result") or {}
            number = f"agent-{attempt['agent_index'] + 1}-attempt-{attempt['attempt_index'] + 1}"
            folder = f"artifacts/{_segment(attempt['task'])}/{number}"
            for ref in result.get("artifacts") or []:
                path = "/".join([folder, *(_segment(part) for part in ref["path"].split("/"))])
                if path not in seen:
                    seen.add(path)
                    files.append(OutputFile(path, "artifacts", int(ref["size"]), digest=ref["digest"]))
    return files


def downloadable_run(store: EventStore, scope: Scope, key: str) -> dict[str, Any]:
    run = find_run(store, scope, key)
    if run["status"] in NOT_STARTED:
        raise Conflict("Outputs are not yet available for pending or queued benchmark runs.", code="CONFLICT")
    return run


def manifest(store: EventStore, scope: Scope, key: str, types: list[str]) -> tuple[dict[str, Any], int]:
    """The manifest body and the pinned version."""
    run = downloadable_run(store, scope, key)
    version = store.stream_version(run_stream(run["id"]))
    files = files_of(load_snapshot(store, run["id"], version), types)
    token = f"v{version}"
    body = {
        "files": [{"path": f.path, "size": f.size, "token": token} for f in files],
        "totals": {
            "files": len(files),
            "bytes": sum(f.size for f in files),
            "types": types,
            "run_id": run["id"],
            "run_status": run["status"],
        },
    }
    return body, version


def _version(token: Any, current: int) -> int | None:
    if token is None:
        return current
    if isinstance(token, str) and token.startswith("v") and token[1:].isdigit():
        version = int(token[1:])
        return version if 0 < version <= current else None
    return None


def signed_urls(
    store: EventStore, scope: Scope, key: str, items: Any, base_url: str, signing_key: bytes
) -> dict[str, Any]:
    """URLs for the requested manifest items; items that name no file of the run are left out."""
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_URL_ITEMS:
        raise Invalid(f"items must be a list of 1..{MAX_URL_ITEMS} objects", code="VALIDATION", field="items")
    run = downloadable_run(store, scope, key)
    current = store.stream_version(run_stream(run["id"]))
    expires = int(time.time()) + URL_TTL_SECONDS
    out = []
    known: dict[int, set[str]] = {}
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("path"), str):
            raise Invalid("each item needs a path", code="VALIDATION", field="items")
        safe_path(item["path"], f"items.{index}.path")
        version = _version(item.get("token"), current)
        if version is None:
            continue
        if version not in known:
            snapshot = load_snapshot(store, run["id"], version)
            known[version] = {f.path for f in files_of(snapshot, ["artifacts"])} | set(GENERATED)
        if item["path"] not in known[version]:
            continue
        url = sign_url(base_url, signing_key, run["id"], item["path"], version, expires)
        out.append({"path": item["path"], "url": url, "token": item.get("token")})
    return {"items": out, "expires_in": URL_TTL_SECONDS}


def _signature(signing_key: bytes, run_id: str, path: str, version: int, expires: int) -> str:
    message = "\n".join((run_id, path, str(version), str(expires))).encode()
    return hmac.new(signing_key, message, hashlib.sha256).hexdigest()


def sign_url(base_url: str, signing_key: bytes, run_id: str, path: str, version: int, expires: int) -> str:
    """An absolute URL that opens one file of one run until `expires` (unix seconds)."""
    quoted = "/".join(quote(part, safe="") for part in path.split("/"))
    query = urlencode(
        {"v": version, "exp": expires, "sig": _signature(signing_key, run_id, path, version, expires)}
    )
    return f"{base_url.rstrip('/')}{DOWNLOAD_PREFIX}/{quote(run_id, safe='')}/{quoted}?{query}"


def verify_url(signing_key: bytes, run_id: str, path: str, version: str, expires: str, sig: str) -> int:
    """The pinned version if the signature holds and has not expired; 403 otherwise."""
    if not (version.isdigit() and expires.isdigit()):
        raise Forbidden("Download link is invalid", code="FORBIDDEN")
    expected = _signature(signing_key, run_id, path, int(version), int(expires))
    if not hmac.compare_digest(expected, sig):
        raise Forbidden("Download link is invalid", code="FORBIDDEN")
    if int(expires) < time.time():
        raise Forbidden("Download link has expired", code="FORBIDDEN")
    return int(version)


def signed_file(store: EventStore, run_id: str, path: str, version: int) -> OutputFile:
    for output in files_of(load_snapshot(store, run_id, version), [type_of(path)]):
        if output.path == path:
            return output
    raise NotFound("File not found", code="NOT_FOUND")
