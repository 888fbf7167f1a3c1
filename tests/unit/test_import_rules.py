"""The house rules of imports, read from the sources (ast), over every module of services/*, shared/ and
src/:

- **No import cycle** between the modules of one package. Every import statement counts: at the top,
  inside a function, or under `if TYPE_CHECKING:` (a type-only import still ties the two modules to each
  other; one side takes what it needs as an argument instead). A package's `__init__` running when one of
  its submodules is imported is Python's import order, not a dependency: it is not an edge.
- **No service imports another service.** Services meet in the event store and on NATS only; what two of
  them need is the kernel's (regatta_shared). The kernel imports no service and not the CLI.
- **The CLI (src/regatta) imports no service either: it launches them.** It names a service's module only
  as a string it runs (`python -m <module>`, or the stack's launcher `regatta.zygote`, which imports each
  service's entry from the service list in a process of its own before forking it). Those strings are
  exactly `LAUNCHED`: each service's module and entry (regatta.services.SERVICES), the gateway's read-model
  rebuild and the executors' environment chooser.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from regatta.services import CHOOSE_ENVIRONMENT_MODULE, REBUILD_MODULE, SERVICES
from tests.conftest import ROOT

Kind = Literal["service", "kernel", "cli"]
KERNEL, CLI = "regatta_shared", "regatta"

LAUNCHED = frozenset(
    {service.module for service in SERVICES}
    | {service.main_module for service in SERVICES}
    | {REBUILD_MODULE, CHOOSE_ENVIRONMENT_MODULE}
)


@dataclass(frozen=True)
class Package:
    name: str  # its top-level import name
    folder: Path
    kind: Kind


def packages(repo: Path) -> list[Package]:
    """Each service's package (services/<name>/src/<package>), the kernel and the CLI."""
    found = [
        Package(folder.name, folder, "service")
        for folder in sorted(repo.glob("services/*/src/*"))
        if (folder / "__init__.py").is_file()
    ]
    found.append(Package(KERNEL, repo / "shared" / "src" / KERNEL, "kernel"))
    found.append(Package(CLI, repo / "src" / CLI, "cli"))
    return [package for package in found if package.folder.is_dir()]


def modules(package: Package) -> dict[str, Path]:
    found = {}
    for path in sorted(package.folder.rglob("*.py")):
        parts = list(path.relative_to(package.folder.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported(source: str, module: str, is_package: bool) -> list[tuple[str, int]]:
    """(name, line) of every import in `source`, anywhere in it, relative ones resolved; `from pkg import
    name` gives `pkg.name` (a module, or an attribute of pkg: `edge` tells which)."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            found.extend((f"{base}.{alias.name}", node.lineno) for alias in node.names)
    return found


def edge(name: str, known: Mapping[str, Path]) -> str | None:
    """The module of the walked tree that importing `name` loads: the longest known prefix."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return None


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle, as a path that returns to its start, per strongly connected component (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(_path_within(graph, component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(found)


def _path_within(graph: Mapping[str, set[str]], component: set[str]) -> list[str]:
    """The shortest way from the component's first module back to itself."""
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for target in sorted(graph.get(node, set()) & component):
            if target == start:
                return [*paths[node], start]
            if target not in paths:
                paths[target] = [*paths[node], target]
                queue.append(target)
    raise AssertionError(f"no cycle through {start}")  # a strongly connected component has one


def _strings(source: str) -> Iterator[tuple[str, int]]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value, node.lineno


def violations(repo: Path, launched: frozenset[str] = LAUNCHED) -> list[str]:
    """Every broken rule, one line each, naming the file and line."""
    walked = packages(repo)
    services = {package.name for package in walked if package.kind == "service"}
    found: list[str] = []
    for package in walked:
        known = modules(package)
        graph: dict[str, set[str]] = {name: set() for name in known}
        for name, path in known.items():
            source = path.read_text()
            where = path.relative_to(repo)
            for target, line in imported(source, name, path.name == "__init__.py"):
                top = target.split(".")[0]
                if top != package.name and (top in services or (package.kind == "kernel" and top == CLI)):
                    found.append(f"{where}:{line}: {package.kind} {package.name} imports {target}")
                inside = edge(target, known)
                if inside is not None and inside != name:
                    graph[name].add(inside)
            if package.kind == "cli":
                for text, line in _strings(source):
                    if text.split(".")[0] in services and text not in launched:
                        found.append(f"{where}:{line}: the CLI names {text!r}, which it does not launch")
        found += [f"import cycle in {package.name}: {' -> '.join(cycle)}" for cycle in cycles(graph)]
    return found


def test_no_import_cycle_and_no_service_imports_another() -> None:
    found = violations(ROOT)
    assert not found, "\n".join(found)


def test_the_check_walks_every_package_and_module() -> None:
    walked = {package.name: package for package in packages(ROOT)}
    assert {service.module for service in SERVICES} | {KERNEL, CLI} == set(walked)
    for name, module in [
        ("regatta_executor", "regatta_executor.attempt.runner"),
        ("regatta_gateway", "regatta_gateway.web.routes"),
        ("regatta_shared", "regatta_shared.statistics.paired"),
        ("regatta", "regatta.zygote"),
    ]:
        found = modules(walked[name])
        assert module in found, module
        assert len(found) > 5, name


def test_every_launched_module_exists_and_has_a_main() -> None:
    """What the CLI may name is launchable: a module of a service that runs `main()` (or is its
    package's `__main__`)."""
    known = {name: path for package in packages(ROOT) for name, path in modules(package).items()}
    for name in LAUNCHED:
        path = known[name]
        main = path.parent / "__main__.py" if path.name == "__init__.py" else path
        assert "def main(" in main.read_text() or "main()" in main.read_text(), name


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_check_reports_a_cycle_and_imports_across_services(tmp_path: Path) -> None:
    """A tiny tree that breaks every rule once: the check names each break, and nothing else."""
    _write(
        tmp_path,
        {
            "services/alpha/src/regatta_alpha/__init__.py": "from . import one\n",
            "services/alpha/src/regatta_alpha/one.py": "from .two import helper\n",
            # A type-only import back is a cycle too.
            "services/alpha/src/regatta_alpha/two.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .one import Thing\n"
            ),
            "services/alpha/src/regatta_alpha/three.py": "def late():\n    import regatta_beta.api\n",
            "services/beta/src/regatta_beta/__init__.py": "",
            "services/beta/src/regatta_beta/api.py": "from regatta_shared import kernel\n",
            "shared/src/regatta_shared/__init__.py": "",
            "shared/src/regatta_shared/kernel.py": "from regatta_alpha import one\nimport regatta.cli\n",
            "src/regatta/__init__.py": "",
            "src/regatta/cli.py": (
                "import os\nfrom regatta_beta.api import run\n"
                "os.execv('python', ['python', '-m', 'regatta_alpha'])\n"
                "os.execv('python', ['python', '-m', 'regatta_beta.api'])\n"
            ),
        },
    )
    assert violations(tmp_path, launched=frozenset({"regatta_alpha"})) == [
        "services/alpha/src/regatta_alpha/three.py:2: service regatta_alpha imports regatta_beta.api",
        "import cycle in regatta_alpha: regatta_alpha.one -> regatta_alpha.two -> regatta_alpha.one",
        "shared/src/regatta_shared/kernel.py:1: kernel regatta_shared imports regatta_alpha.one",
        "shared/src/regatta_shared/kernel.py:2: kernel regatta_shared imports regatta.cli",
        "src/regatta/cli.py:2: cli regatta imports regatta_beta.api.run",
        "src/regatta/cli.py:4: the CLI names 'regatta_beta.api', which it does not launch",
    ]


def test_a_tree_that_keeps_the_rules_passes(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "services/alpha/src/regatta_alpha/__init__.py": "from .one import helper\n",
            "services/alpha/src/regatta_alpha/one.py": "from regatta_shared.kernel import rule\n",
            "services/alpha/src/regatta_alpha/two.py": "from . import one\nfrom .one import helper\n",
            "shared/src/regatta_shared/__init__.py": "",
            "shared/src/regatta_shared/kernel.py": "import json\n",
            "src/regatta/__init__.py": "",
            # Names a service only as a module it launches.
            "src/regatta/cli.py": "MODULE = 'regatta_alpha'\n",
        },
    )
    assert violations(tmp_path, launched=frozenset({"regatta_alpha"})) == []
