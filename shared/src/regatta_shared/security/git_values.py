"""Git values (URLs, refs, commit ids, repository paths) checked for their kind before any git command.

Each of them comes from a user or a registry's JSON and ends up as a git argument: a value starting
with '-' is an option (`--upload-pack=<command>` runs a command), and a transport such as `ext::` runs
one too. So a commit id is 40 or 64 hex digits, a ref is a name `git check-ref-format` accepts and that
starts with no '-', a repository path is relative and stays inside the repository, and a URL is https or
ssh (a local path or `file://` only where the source policy allows it).
"""

from __future__ import annotations

import re
import subprocess
from urllib.parse import urlsplit

FULL_SHA = re.compile(r"^[0-9a-fA-F]{40}$|^[0-9a-fA-F]{64}$")
SCP_LIKE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*@[A-Za-z0-9][A-Za-z0-9.-]*:[^\s]+$")
MAX_REF = 255
MAX_URL = 2000
# The transports git may use at all (GIT_ALLOW_PROTOCOL): submodules and redirects included.
ALLOWED_PROTOCOLS = "https:ssh:file"


class GitValueInvalid(ValueError):
    pass


def is_commit_id(value: str) -> bool:
    return bool(FULL_SHA.match(value))


def check_ref(value: object, field: str) -> str:
    """A commit id or a ref name git accepts; never something git would read as an option."""
    if not isinstance(value, str) or not value or len(value) > MAX_REF:
        raise GitValueInvalid(f"{field} must be a branch, tag or commit id of at most {MAX_REF} characters")
    if is_commit_id(value) or value == "HEAD":
        return value
    ok = not value.startswith("-") and not any(c.isspace() or ord(c) < 32 for c in value)
    if ok:
        result = subprocess.run(
            ["git", "check-ref-format", "--allow-onelevel", value], capture_output=True, check=False
        )
        ok = result.returncode == 0
    if not ok:
        raise GitValueInvalid(f"{field} must be a branch, tag or commit id")
    return value


def check_commit(value: object, field: str) -> str | None:
    """A registry's `git_commit_id`: absent, a full commit id, or a ref name (fetched as such)."""
    if value is None:
        return None
    return check_ref(value, field)


def check_repo_path(value: object, field: str) -> str:
    """A path inside a repository: relative, no '..' or '.' segment, no leading '-', no control chars."""
    text = str(value) if value is not None else ""
    parts = text.split("/")
    if (
        not text
        or len(text) > 1000
        or text.startswith(("/", "-"))
        or any(p in ("..",) for p in parts)
        or any(ord(c) < 32 or c == "\\" for c in text)
    ):
        raise GitValueInvalid(f"{field} must be a relative path inside the repository")
    return text


def url_kind(value: object, field: str) -> str:
    """'https', 'ssh' or 'local' (an absolute path or file:// URL); anything else is refused."""
    if not isinstance(value, str) or not value or len(value) > MAX_URL or value.startswith("-"):
        raise GitValueInvalid(f"{field} must be an https or ssh git URL")
    if any(c.isspace() or ord(c) < 32 for c in value):
        raise GitValueInvalid(f"{field} must not contain spaces or control characters")
    if value.startswith("/"):
        return "local"
    if SCP_LIKE.match(value):
        return "ssh"
    try:
        parts = urlsplit(value)
    except ValueError:
        raise GitValueInvalid(f"{field} must be an https or ssh git URL") from None
    scheme = parts.scheme.lower()
    if scheme == "file" and not parts.netloc:
        return "local"
    if scheme in ("https", "ssh") and parts.hostname and not parts.hostname.startswith("-"):
        return scheme
    raise GitValueInvalid(f"{field} must be an https or ssh git URL (got {scheme or 'no'} transport)")


def git_environment(base: dict[str, str]) -> dict[str, str]:
    """The environment for every git process: known transports only, never a prompt, no hook or
    credential helper."""
    return {
        "GIT_SSH_COMMAND": "ssh -o BatchMode=yes",
        **base,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ALLOW_PROTOCOL": ALLOWED_PROTOCOLS,
        "GIT_PROTOCOL_FROM_USER": "0",
        # The remote's host was checked by the outbound guard; a redirect would lead git elsewhere.
        "GIT_CONFIG_COUNT": "3",
        "GIT_CONFIG_KEY_0": "http.followRedirects",
        "GIT_CONFIG_VALUE_0": "false",
        # No program of the host's git configuration runs for a repository a user named: no hook, and
        # no credential helper handing the host's credentials to whatever remote that is (an empty
        # value empties the list of helpers).
        "GIT_CONFIG_KEY_1": "core.hooksPath",
        "GIT_CONFIG_VALUE_1": "/dev/null",
        "GIT_CONFIG_KEY_2": "credential.helper",
        "GIT_CONFIG_VALUE_2": "",
    }
