"""The package's import graph has no circle: every module can be read in dependency order.

An import counts where it runs: at module level or inside a function, but not under
`if TYPE_CHECKING:` (those are read by the type checker only). `import a.b` and
`from a import b` both run `a` (the package's `__init__`) and `a.b` when that is a module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import picortex

PACKAGE = Path(picortex.__file__).parent


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _imports(tree: ast.AST, typed: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that runs; with `typed`, those of `if TYPE_CHECKING:` too."""
    for node in ast.iter_child_nodes(tree):
        if not typed and isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), typed)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _imports(node, typed)


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def import_graph(root: Path = PACKAGE, *, typed: bool = False) -> dict[str, set[str]]:
    """Each module of the package and the package's modules it runs when imported.

    `import a.b` runs `a.b`; `from a import b` runs `a` (its `__init__`) and `a.b` when that
    is a module. The rule is strict on purpose: a module that takes anything from a package
    whose `__init__` imports that module back is in a circle, even if Python happens to
    resolve it today.
    """
    files = {_module_name(path, root): path for path in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in _imports(tree, typed):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
                continue
            source = _absolute(module, is_package, node)
            targets.add(source)
            targets.update(f"{source}.{alias.name}" for alias in node.names)
        graph[module] = {target for target in targets if target in files} - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        # Tarjan's algorithm, iterative so a deep graph cannot overflow the stack.
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    group: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1 or node in graph[node]:
                        found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def _named(found: list[list[str]]) -> str:
    return "; ".join(" <-> ".join(circle) for circle in found)


def test_the_package_has_no_import_circle() -> None:
    found = cycles(import_graph())
    assert not found, f"import circles: {_named(found)}"


# The simulator's control API reads some thirty members of `Simulator`, which routes its
# requests there: a protocol for them would copy every signature. The circle is the type
# checker's only, so nothing runs in it.
TYPED_ONLY_CIRCLES = [["picortex.sim.control", "picortex.sim.simulator"]]


def test_the_type_checkers_imports_add_no_other_circle() -> None:
    found = [c for c in cycles(import_graph(typed=True)) if c not in TYPED_ONLY_CIRCLES]
    assert not found, f"import circles through TYPE_CHECKING imports: {_named(found)}"


def _package(tmp_path: Path, modules: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in {"__init__": "", **modules}.items():
        path = root / f"{name.replace('.', '/')}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_circle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "a": "from pkg.b import thing\n",
            "b": "def thing():\n    from pkg import a\n",
        },
    )
    assert cycles(import_graph(root)) == [["pkg.a", "pkg.b"]]


def test_taking_a_module_from_a_package_runs_the_packages_init(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "sub.__init__": "def build():\n    from pkg.sub.tool import NAMES\n",
            "sub.tool": "from pkg.sub import common\nNAMES = ()\n",
            "sub.common": "",
        },
    )
    assert cycles(import_graph(root)) == [["pkg.sub", "pkg.sub.tool"]]


def test_imports_for_the_type_checker_only_are_no_edge(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "a": "import pkg.b\n",
            "b": (
                "import typing\n"
                "if typing.TYPE_CHECKING:\n    from pkg import a\n"
                "else:\n    from pkg import c\n"
            ),
            "c": "",
        },
    )
    graph = import_graph(root)
    assert graph["pkg.b"] == {"pkg", "pkg.c"}
    assert cycles(graph) == []
    assert cycles(import_graph(root, typed=True)) == [["pkg.a", "pkg.b"]]
