"""A benchmark source admitted or refused when it is added, with the field it names (400/403).

Registry-sync checks the same policy again where it reads; this check keeps a refused source out of
the event log altogether, so nothing is appended and no sync starts.
"""

from __future__ import annotations

import os

from regatta_shared.events import BenchmarkSource
from regatta_shared.security.git_values import GitValueInvalid, url_kind
from regatta_shared.security.outbound import OutboundRefused, check_url, resolve, url_endpoint
from regatta_shared.security.source_policy import SourcePolicy, SourceRefused, local_path_of

from regatta_gateway.errors import Forbidden, Invalid
from regatta_gateway.principals import Scope


def admit_source(
    source: BenchmarkSource, scope: Scope, policy: SourcePolicy, *, hosted: bool
) -> BenchmarkSource:
    """The source marked trusted for a platform administrator or the deployment; refused otherwise if
    it names a host path outside the roots, a git value of the wrong kind, or an internal address."""
    trusted = hosted or scope.principal.platform_admin
    try:
        for field, path in _host_paths(source):
            policy.check_host_path(path, field, trusted=trusted)
    except SourceRefused as error:
        raise Forbidden(_outside_roots(error.field, policy), code="FORBIDDEN", field=error.field) from None
    try:
        if source.registry_url:
            check_url(source.registry_url, "registry_url", policy.outbound)
        if source.type == "git" and local_path_of(source.git_url or "") is None:
            _check_remote(source.git_url or "", policy)
    except OutboundRefused as error:
        raise Invalid(str(error), code="VALIDATION", field=error.field) from None
    return source.model_copy(update={"trusted": trusted})


def _outside_roots(field: str, policy: SourcePolicy) -> str:
    """The refusal, naming the setting and its value: the user learns where a path may be, or that the
    operator must name a root (or a platform administrator add it)."""
    if not policy.roots:
        return (
            f"{field}: no host path may be added: REGATTA_SOURCE_ROOTS is empty (set it to the folders "
            "members may add from), and outside it only platform administrators may add host paths"
        )
    roots = os.pathsep.join(str(root) for root in policy.roots)
    return (
        f"{field}: outside the allowed roots: REGATTA_SOURCE_ROOTS={roots}; put the folder under one "
        "of them, or ask a platform administrator to add it"
    )


def _host_paths(source: BenchmarkSource) -> list[tuple[str, str]]:
    if source.type == "folder":
        return [("path", source.ref)]
    if source.type == "registry" and source.registry_path:
        return [("registry_path", source.registry_path)]
    if source.type == "git":
        local = local_path_of(source.git_url or "")
        return [("repo", local)] if local else []
    return []


def _check_remote(git_url: str, policy: SourcePolicy) -> None:
    """An https or ssh remote whose host is not internal (unless allow-listed); a ref of a git kind."""
    try:
        kind = url_kind(git_url, "repo")
    except GitValueInvalid as error:
        raise Invalid(str(error), code="VALIDATION", field="repo") from None
    if kind == "ssh" and not git_url.lower().startswith("ssh://"):
        resolve(git_url.split("@", 1)[1].split(":", 1)[0], 22, "repo", policy.outbound)
        return
    host, port = url_endpoint(git_url, "repo", ("https", "ssh"))
    resolve(host, port, "repo", policy.outbound)
