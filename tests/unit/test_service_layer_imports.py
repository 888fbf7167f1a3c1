"""The gateway's service layer knows no HTTP: no module in it imports the entrypoints (http/, web/) or the
web framework, directly or through another gateway module, so its rules can be called and tested as
plain functions. Errors are kinds (regatta_gateway.errors); http/errors.py alone maps them to statuses."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import regatta_gateway

PACKAGE = Path(regatta_gateway.__file__).parent
SERVICE_LAYER = ("commands", "queries", "admission", "notifications", "secrets", "readmodels", "workspaces")
SERVICE_MODULES = ("errors", "principals", "authentication")
FORBIDDEN = ("regatta_gateway.http", "regatta_gateway.web", "fastapi", "starlette")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(source: str, module: str, is_package: bool = False) -> list[str]:
    """Every module `source` imports, anywhere in it (inside functions too), relative ones resolved;
    `from pkg import name` counts as `pkg.name` as well, since `name` may be a module."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            found.append(base)
            found.extend(f"{base}.{alias.name}" for alias in node.names)
    return found


def forbidden(name: str) -> bool:
    return any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN)


def service_layer() -> dict[str, Path]:
    paths = [path for package in SERVICE_LAYER for path in sorted((PACKAGE / package).rglob("*.py"))]
    paths += [PACKAGE / f"{name}.py" for name in SERVICE_MODULES]
    return {module_name(path): path for path in paths}


def gateway_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def violations() -> list[str]:
    """`module imports X` for each forbidden import, or `module imports X (through a, b)` when it comes
    in through other gateway modules."""
    modules = gateway_modules()
    edges = {
        name: imported(path.read_text(), name, path.name == "__init__.py") for name, path in modules.items()
    }
    found = []
    for start in service_layer():
        seen, queue = {start}, [(start, ())]
        while queue:
            name, via = queue.pop(0)
            for target in edges.get(name, []):
                if forbidden(target):
                    through = f" (through {', '.join(via)})" if via else ""
                    found.append(f"{start} imports {target}{through}")
                elif target in modules and target not in seen:
                    seen.add(target)
                    queue.append((target, (*via, target)))
    return sorted(set(found))


def test_no_service_module_imports_http_web_fastapi_or_starlette() -> None:
    found = violations()
    assert not found, "\n".join(found)


def test_the_check_walks_the_whole_service_layer() -> None:
    walked = service_layer()
    # Every package of the layer is there with its modules, and the entrypoints are not.
    for package in SERVICE_LAYER:
        assert any(name.startswith(f"regatta_gateway.{package}.") for name in walked), package
    assert "regatta_gateway.commands.runs" in walked and "regatta_gateway.secrets.store" in walked
    assert not any(name.startswith(("regatta_gateway.http", "regatta_gateway.web")) for name in walked)


def test_the_check_names_the_module_and_the_import_it_refuses() -> None:
    source = (
        "import fastapi\n"
        "from starlette.responses import Response\n"
        "from ..http.errors import body\n"
        "def late():\n"
        "    from regatta_gateway import web\n"
    )
    names = imported(source, "regatta_gateway.commands.example")
    assert [name for name in names if forbidden(name)] == [
        "fastapi",
        "starlette.responses",
        "starlette.responses.Response",
        "regatta_gateway.http.errors",
        "regatta_gateway.http.errors.body",
        "regatta_gateway.web",
    ]
    assert not forbidden("regatta_gateway.httpx") and not forbidden("fastapix")


def test_secrets_and_notifications_do_not_import_commands() -> None:
    for name, path in service_layer().items():
        if name.startswith(("regatta_gateway.secrets", "regatta_gateway.notifications")):
            wrong = [m for m in imported(path.read_text(), name) if m.startswith("regatta_gateway.commands")]
            assert wrong == [], f"{name} imports {wrong}"


def test_importing_the_service_layer_loads_no_web_framework() -> None:
    """At run time too, through any library (a fresh interpreter: this one has loaded FastAPI)."""
    modules = ", ".join(sorted(service_layer()))
    check = (
        f"import sys, {modules}\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'starlette')\n"
        "    or m.startswith(('regatta_gateway.http', 'regatta_gateway.web')))\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
