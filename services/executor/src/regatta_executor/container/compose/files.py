"""Reading, interpolating and merging a task's compose files the way Docker Compose does, without it.

The files are the task author's: each is bounded in size and nesting before it is parsed (PyYAML's
composer recurses once per level, and aliases let a small file name a huge tree), parsed with
`yaml.safe_load` (no tags, so no Python objects and no `!reset`/`!override`), and walked with a node
budget that counts an aliased subtree every time it is reached. `${VAR}` is replaced from the
variables the caller gives (Harbor's infrastructure variables and the task's env), never from the
executor's own environment: a task must not read the executor's secrets through its compose file.

Merging follows the Compose specification's merge rules for the keys Regatta supports: mappings merge
key by key, `environment`, `build.args`, `depends_on` and `networks` merge as mappings whichever form
each file uses, `command`, `entrypoint` and `healthcheck.test` are replaced, a service's `volumes`
merge by target, and any other sequence is appended to.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

MAX_FILE_BYTES = 256 * 1024
MAX_DEPTH = 24
MAX_NODES = 50_000
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_EXPRESSION = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])(.*))?", re.DOTALL)
# Sequences that the Compose spec replaces instead of appending to.
_REPLACED = {("command",), ("entrypoint",), ("healthcheck", "test")}


class ComposeError(ValueError):
    """A compose file Regatta does not run: the message names the file and the key."""


def load(path: Path, label: str) -> dict[str, Any]:
    """The document of one compose file, bounded before it is parsed."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ComposeError(f"{label}: larger than {MAX_FILE_BYTES // 1024} KiB")
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ComposeError(f"{label}: not UTF-8 text") from None
    except OSError as exc:
        raise ComposeError(f"{label}: cannot be read ({exc.strerror})") from None
    return parse(text, label)


def parse(text: str, label: str) -> dict[str, Any]:
    if len(text.encode()) > MAX_FILE_BYTES:
        raise ComposeError(f"{label}: larger than {MAX_FILE_BYTES // 1024} KiB")
    try:
        depth = 0
        for event in yaml.parse(text, Loader=yaml.SafeLoader):  # iterative: safe on any nesting
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise ComposeError(f"{label}: nested deeper than {MAX_DEPTH} levels")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ComposeError(f"{label}: not valid YAML{where}: {str(problem)[:200]}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ComposeError(f"{label}: the top level is not a mapping")
    _count_nodes(document, label)
    return document


def _count_nodes(node: Any, label: str) -> None:
    budget = MAX_NODES
    stack = [node]
    while stack:
        budget -= 1
        if budget < 0:
            raise ComposeError(f"{label}: more than {MAX_NODES} values (aliases counted where used)")
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def interpolate(node: Any, env: Mapping[str, str], label: str, path: str = "") -> Any:
    """A copy of `node` with every string value's `${VAR}` forms replaced (keys are left as they are,
    as Compose does)."""
    if isinstance(node, str):
        return substitute(node, env, label, path)
    if isinstance(node, dict):
        return {key: interpolate(value, env, label, _join(path, key)) for key, value in node.items()}
    if isinstance(node, list):
        return [interpolate(item, env, label, f"{path}[{index}]") for index, item in enumerate(node)]
    return node


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def substitute(text: str, env: Mapping[str, str], label: str, path: str) -> str:
    """`$$`, `$VAR`, `${VAR}`, `${VAR:-default}`, `${VAR-default}`, `${VAR:?error}`, `${VAR?error}`,
    `${VAR:+other}` and `${VAR+other}`, with nested forms in the default."""
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char != "$":
            out.append(char)
            index += 1
            continue
        following = text[index + 1 : index + 2]
        if following == "$":
            out.append("$")
            index += 2
        elif following == "{":
            end = _closing_brace(text, index + 2)
            if end < 0:
                raise ComposeError(f"{label}: {path}: an unclosed ${{ in {text[:80]!r}")
            out.append(_expression(text[index + 2 : end], env, label, path))
            index = end + 1
        elif match := _NAME.match(text, index + 1):
            out.append(env.get(match.group(), ""))
            index = match.end()
        else:
            out.append("$")
            index += 1
    return "".join(out)


def _closing_brace(text: str, start: int) -> int:
    depth = 1
    index = start
    while index < len(text):
        if text.startswith("${", index):
            depth += 1
            index += 2
            continue
        if text[index] == "}":
            depth -= 1
            if depth == 0:
                return index
        index += 1
    return -1


def _expression(expression: str, env: Mapping[str, str], label: str, path: str) -> str:
    match = _EXPRESSION.fullmatch(expression)
    if match is None:
        raise ComposeError(f"{label}: {path}: invalid interpolation ${{{expression[:80]}}}")
    name, operator, operand = match.group(1), match.group(2), match.group(3) or ""
    value = env.get(name)
    if operator is None:
        return value or ""
    empty_counts = operator.startswith(":")
    missing = value is None or (empty_counts and value == "")
    kind = operator[-1]
    if kind == "-":
        return substitute(operand, env, label, path) if missing else str(value)
    if kind == "+":
        return "" if missing else substitute(operand, env, label, path)
    if missing:  # "?"
        said = substitute(operand, env, label, path)[:200] or f"{name} is not set"
        raise ComposeError(f"{label}: {path}: required variable {name}: {said}")
    return str(value)


def normalize_service(service: Any) -> Any:
    """The forms of a service that Compose merges as mappings, made mappings (so that a later file's
    list merges into an earlier file's mapping): `build` as a string, `environment` and `build.args`
    as KEY=VALUE lists, `depends_on` and `networks` as lists of names."""
    if not isinstance(service, dict):
        return service
    service = dict(service)
    if isinstance(service.get("build"), str):
        service["build"] = {"context": service["build"]}
    if isinstance(service.get("build"), dict) and isinstance(service["build"].get("args"), list):
        service["build"] = {**service["build"], "args": _pairs(service["build"]["args"])}
    if isinstance(service.get("environment"), list):
        service["environment"] = _pairs(service["environment"])
    if isinstance(service.get("depends_on"), list):
        service["depends_on"] = {
            name: {"condition": "service_started"} if isinstance(name, str) else name
            for name in service["depends_on"]
        }
    if isinstance(service.get("networks"), list):
        service["networks"] = {name: None for name in service["networks"]}
    return service


def _pairs(items: list[Any]) -> dict[Any, Any]:
    """KEY=VALUE items as a mapping; a bare KEY maps to None (its value comes from the variables)."""
    found: dict[Any, Any] = {}
    for item in items:
        if isinstance(item, str) and "=" in item:
            key, _, value = item.partition("=")
            found[key] = value
        else:
            found[item] = None
    return found


def merge(documents: list[dict[str, Any]]) -> dict[str, Any]:
    """The documents merged in order, later ones overriding earlier ones (Compose's `-f` order)."""
    merged: dict[str, Any] = {}
    for document in documents:
        document = dict(document)
        if isinstance(document.get("services"), dict):
            document["services"] = {
                name: normalize_service(service) for name, service in document["services"].items()
            }
        merged = _merge_mapping(merged, document, ())
    return merged


def _merge_mapping(base: dict[str, Any], override: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    result = dict(base)
    for key, value in override.items():
        result[key] = _merge_value(result.get(key), value, (*path, str(key))) if key in result else value
    return result


def _merge_value(base: Any, override: Any, path: tuple[str, ...]) -> Any:
    inside_service = len(path) >= 3 and path[0] == "services"
    relative = path[2:] if inside_service else path
    if isinstance(base, dict) and isinstance(override, dict):
        return _merge_mapping(base, override, path)
    if isinstance(base, list) and isinstance(override, list):
        if inside_service and relative in _REPLACED:
            return override
        if inside_service and relative == ("volumes",):
            return _merge_by_target(base, override)
        return base + [item for item in override if item not in base]
    return override


def _merge_by_target(base: list[Any], override: list[Any]) -> list[Any]:
    def target(mount: Any) -> Any:
        if isinstance(mount, dict):
            return mount.get("target")
        if isinstance(mount, str):
            parts = mount.split(":")
            return parts[1] if len(parts) > 1 else parts[0]
        return id(mount)

    replaced = {target(mount) for mount in override}
    return [mount for mount in base if target(mount) not in replaced] + list(override)
