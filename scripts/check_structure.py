"""Check the tree's structure: which package may import which, and no import circles.

    python scripts/check_structure.py            # prints the layers' edges; exit 1 on a problem
    python scripts/check_structure.py --graph    # also every package-to-package edge with a count

The layers (docs/architecture.md, "The packages"):
- `opentinker_api`: the generated gRPC API and the wire's conventions; imports no other package.
- `opentinker_env`: the environment interface; imports no other package.
- `opentinker_runtime`: what the services stand on; imports the API and the environment interface.
- `opentinker` (the SDK: client, CLI, dashboard): imports the API and the environment interface,
  and the runtime only inside a function (`opentinker up` and the dashboard's server need it; a
  laptop that only submits and watches jobs does not).
- each service `opentinker_<name>`: imports the API, the environment interface, the runtime and
  itself; never the SDK, never another service.

A circle is a set of modules that import one another, directly or through others (imports inside
functions count; imports only for type checking do not).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_ROOTS = ("packages/api", "packages/env", "packages/runtime", "clients/python", "services/*")
FOUNDATIONS = {"opentinker_api", "opentinker_env"}
ALLOWED = {
    "opentinker_api": set(),
    "opentinker_env": set(),
    "opentinker_runtime": FOUNDATIONS,
    "opentinker": FOUNDATIONS,
}
LAZY_ALLOWED = {"opentinker": {"opentinker_runtime"}}
SERVICE_ALLOWED = FOUNDATIONS | {"opentinker_runtime"}


@dataclass(frozen=True)
class Import:
    source: str   # the importing module
    target: str   # the imported module (the deepest one that exists in the tree)
    path: Path
    line: int
    lazy: bool    # inside a function


def discover_modules(root: Path) -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for pattern in SOURCE_ROOTS:
        for base in sorted(root.glob(pattern)):
            for path in sorted(base.rglob("*.py")):
                relative = path.relative_to(base)
                if relative.parts[0].endswith(".egg-info") or "__pycache__" in relative.parts:
                    continue
                if len(relative.parts) == 1:
                    continue  # a loose script beside the package is not part of it
                parts = list(relative.with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                modules[".".join(parts)] = path
    return modules


def is_package(name: str, modules: dict[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


def resolve_relative(module: str, level: int, name: str | None, package: bool) -> str:
    parts = module.split(".")
    base = parts if package else parts[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([name] if name else []))


def deepest_known(name: str, modules: dict[str, Path]) -> str | None:
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


class ImportVisitor(ast.NodeVisitor):
    def __init__(self, module: str, path: Path, modules: dict[str, Path]) -> None:
        self.module, self.path, self.modules = module, path, modules
        self.depth = 0
        self.found: list[Import] = []

    def visit_FunctionDef(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            base = resolve_relative(self.module, node.level, node.module, is_package(self.module, self.modules))
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            self._add(submodule if submodule in self.modules else base, node.lineno)

    def _add(self, name: str, line: int) -> None:
        target = deepest_known(name, self.modules)
        if target is not None and target != self.module:
            self.found.append(Import(self.module, target, self.path, line, self.depth > 0))
        elif target is None and top_level(name) in external_layers(self.modules):
            self.found.append(Import(self.module, name, self.path, line, self.depth > 0))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def top_level(name: str) -> str:
    return name.split(".")[0]


def external_layers(modules: dict[str, Path]) -> set[str]:
    return {top_level(name) for name in modules}


def collect_imports(modules: dict[str, Path]) -> list[Import]:
    imports: list[Import] = []
    for module, path in modules.items():
        visitor = ImportVisitor(module, path, modules)
        visitor.visit(ast.parse(path.read_text(), filename=str(path)))
        imports.extend(visitor.found)
    return imports


def layer_problem(item: Import) -> str | None:
    source, target = top_level(item.source), top_level(item.target)
    if source == target:
        return None
    if source in ALLOWED:
        if target in ALLOWED[source] or (item.lazy and target in LAZY_ALLOWED.get(source, set())):
            return None
        if target in LAZY_ALLOWED.get(source, set()):
            return f"{source} imports {target} at module level (only inside a function)"
        return f"{source} may not import {target}"
    if target in SERVICE_ALLOWED:
        return None
    if target == "opentinker":
        return f"service {source} imports the SDK"
    return f"service {source} imports another service, {target}"


def find_circles(imports: list[Import], modules: dict[str, Path]) -> list[list[str]]:
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for item in imports:
        if item.target in graph:
            graph[item.source].add(item.target)
    return [sorted(component) for component in strongly_connected(graph) if len(component) > 1]


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the tree is deeper than Python's recursion limit allows)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)
    return components


def check(root: Path) -> tuple[list[str], list[Import], dict[str, Path]]:
    modules = discover_modules(root)
    imports = collect_imports(modules)
    problems = []
    for item in imports:
        problem = layer_problem(item)
        if problem:
            problems.append(f"{item.path.relative_to(root)}:{item.line}: {problem} ({item.target})")
    for circle in find_circles(imports, modules):
        problems.append("circle: " + " -> ".join(circle))
    return problems, imports, modules


def package_edges(imports: list[Import]) -> Counter:
    return Counter((top_level(i.source), top_level(i.target)) for i in imports
                   if top_level(i.source) != top_level(i.target))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--graph", action="store_true", help="print every package-to-package edge")
    args = parser.parse_args(argv)
    problems, imports, modules = check(args.root)
    if args.graph:
        for (source, target), count in sorted(package_edges(imports).items()):
            print(f"{source} -> {target}: {count}")
    print(f"{len(modules)} modules, {len(imports)} imports between them")
    for problem in problems:
        print(problem)
    print("structure: OK" if not problems else f"structure: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
