"""The house rules of the import graph: nothing imports upward, nothing imports in a circle.

The layers are declared once, in the folder map of docs/architecture.md: each `== layer N: ... ==`
line opens a layer, and each top-level package (`algos/`) or module (`cli.py`, `__init__.py` for
the package itself) written at two spaces' indent under it sits in that layer. These tests read
every module of reinforge/ with `ast` (imports at module level, inside functions, `import x` and
`from x import y`, relative ones too) and check:
  - every top-level package and module is in the map once, and the map names nothing that is gone;
  - no module imports from a higher layer than its own (its own layer and those below are fine);
  - no two modules import each other, directly or through others. An import under
    `if TYPE_CHECKING:` never runs, so it cannot make a circle and is left out of that check; it
    still names what it uses, so it must not run upward.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYER_MAP = ROOT / "docs" / "architecture.md"
LAYER_LINE = re.compile(r"^== layer (\d+): .* ==$")
ENTRY_LINE = re.compile(r"^  (\w+(?:/|\.py))(?:\s|$)")

# Imports allowed to run upward, or modules left out of the circle check, while a change that
# removes them is under way (empty now). Each entry must still be needed:
# test_every_exception_is_still_needed fails once it is not, so the list empties itself.
UPWARD_ELSEWHERE: set[tuple[str, str]] = set()
CIRCLE_ELSEWHERE: set[str] = set()


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted
    path: Path  # its file
    line: int
    target: str  # the imported module, dotted (the submodule when `from pkg import submodule`)
    type_only: bool  # under `if TYPE_CHECKING:`
    source_entry: str  # the layer map's entries of both ends
    target_entry: str


def read_layers(text: str) -> dict[str, int]:
    """{'algos/': 1, 'cli.py': 17, ...} from the folder map's layer lines and entries."""
    layers: dict[str, int] = {}
    layer = None
    for line in text.splitlines():
        if line.startswith("```"):
            layer = None  # entries count only inside the map's code block, under a layer line
        if (m := LAYER_LINE.match(line)) is not None:
            layer = int(m.group(1))
        elif layer is not None and (m := ENTRY_LINE.match(line)) is not None:
            assert m.group(1) not in layers, f"{m.group(1)} is in the layer map twice"
            layers[m.group(1)] = layer
    return layers


def module_files(package_root: Path) -> dict[str, Path]:
    """Every module of the package at `package_root`, by dotted name."""
    base = package_root.parent
    modules = {}
    for path in sorted(package_root.rglob("*.py")):
        parts = list(path.relative_to(base).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def entry_of(path: Path, package_root: Path) -> str:
    """The layer map's entry of a module's file: its top-level package (`algos/`) or module (`cli.py`)."""
    parts = path.relative_to(package_root).parts
    return f"{parts[0]}/" if len(parts) > 1 else parts[0]


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(module: str, path: Path, modules: dict[str, Path], package_root: Path) -> list[Import]:
    """Every import of a module of the package, wherever it stands in the file."""
    top = module.split(".")[0]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def resolve(name: str) -> str | None:
        parts = name.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        return ".".join(parts) or None

    found: list[Import] = []

    def visit(node: ast.AST, type_only: bool) -> None:
        if isinstance(node, ast.If) and _type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, type_only)
            return
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [t for a in node.names if a.name.split(".")[0] == top and (t := resolve(a.name))]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            if name.split(".")[0] == top:
                for alias in node.names:
                    sub = f"{name}.{alias.name}"
                    target = sub if sub in modules else resolve(name)
                    if target:
                        targets.append(target)
        for target in dict.fromkeys(targets):
            found.append(Import(module, path, node.lineno, target, type_only,
                                entry_of(path, package_root), entry_of(modules[target], package_root)))
        for child in ast.iter_child_nodes(node):
            visit(child, type_only)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), False)
    return found


def import_graph(package_root: Path) -> list[Import]:
    modules = module_files(package_root)
    return [imp for module, path in modules.items() for imp in imports_of(module, path, modules, package_root)]


@functools.cache
def reinforge_graph() -> tuple[Import, ...]:
    return tuple(import_graph(ROOT / "reinforge"))


def where(imp: Import) -> str:
    return f"{imp.path.relative_to(ROOT) if imp.path.is_relative_to(ROOT) else imp.path}:{imp.line}"


def upward_imports(graph: tuple[Import, ...] | list[Import], layers: dict[str, int], allowed: set[tuple[str, str]] = frozenset()) -> list[str]:
    found = []
    for imp in graph:
        src, dst = imp.source_entry, imp.target_entry
        if src not in layers or dst not in layers:
            continue  # not in the map: test_the_layer_map_names_every_top_level_package_and_module_once says so
        if layers[dst] > layers[src] and (imp.source, imp.target) not in allowed:
            found.append(f"{where(imp)} imports {imp.target} (layer {layers[src]} {src} -> layer {layers[dst]} {dst})")
    return found


def circles(graph: tuple[Import, ...] | list[Import], left_out: set[str] = frozenset()) -> list[str]:
    """Each strongly connected set of modules (Tarjan), as the imports that tie it, one per line."""
    edges: dict[str, dict[str, Import]] = {}
    for imp in graph:
        if not imp.type_only and imp.source != imp.target and not {imp.source, imp.target} & left_out:
            edges.setdefault(imp.source, {}).setdefault(imp.target, imp)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(v: str) -> None:  # recursion depth is bounded by the longest import chain (tens)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    found = []
    for group in groups:
        members = set(group)
        ties = [f"{where(imp)} imports {w}" for v in group for w, imp in edges.get(v, {}).items() if w in members]
        found.append(f"circle of {len(group)} modules: " + "; ".join(ties))
    return found


def test_the_layer_map_names_every_top_level_package_and_module_once():
    layers = read_layers(LAYER_MAP.read_text(encoding="utf-8"))
    package = ROOT / "reinforge"
    on_disk = {f"{p.name}/" for p in package.iterdir() if (p / "__init__.py").is_file()}
    on_disk |= {p.name for p in package.glob("*.py")}
    missing, gone = sorted(on_disk - set(layers)), sorted(set(layers) - on_disk)
    assert not missing and not gone, (
        f"docs/architecture.md's layer map: add {missing} under the layer of what they import; "
        f"remove {gone}, which reinforge/ no longer has"
    )


def test_no_import_runs_upward():
    layers = read_layers(LAYER_MAP.read_text(encoding="utf-8"))
    found = upward_imports(reinforge_graph(), layers, UPWARD_ELSEWHERE)
    assert not found, (
        f"{len(found)} imports run upward (a module imports only its own layer and those below; "
        "the layers: docs/architecture.md):\n" + "\n".join(found)
    )


def test_no_modules_import_each_other_in_a_circle():
    left_out = {m for m in CIRCLE_ELSEWHERE if m in module_files(ROOT / "reinforge")}
    found = circles(reinforge_graph(), left_out)
    assert not found, f"{len(found)} circles of imports (function-level imports included):\n" + "\n".join(found)


def test_every_exception_is_still_needed():
    graph = {(imp.source, imp.target) for imp in reinforge_graph()}
    modules = module_files(ROOT / "reinforge")
    done = sorted(f"{a} -> {b}" for a, b in UPWARD_ELSEWHERE if (a, b) not in graph)
    done += sorted(m for m in CIRCLE_ELSEWHERE if m not in modules)
    assert not done, f"these no longer exist; remove them from UPWARD_ELSEWHERE / CIRCLE_ELSEWHERE in tests/test_layering.py: {done}"


def test_the_checks_see_function_level_relative_and_plain_imports(tmp_path):
    """The checker itself, on a package of four modules: an upward `import` inside a function, a
    circle closed by a relative import, and a type-only import that runs upward but closes no circle."""
    pkg = tmp_path / "reinforge"
    (pkg / "low").mkdir(parents=True)
    (pkg / "high").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "high" / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("def f():\n    import reinforge.high.c\n")
    (pkg / "low" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from reinforge.high import c\nfrom . import a\n"
    )
    (pkg / "high" / "c.py").write_text("from reinforge.high import d\n")
    (pkg / "high" / "d.py").write_text("def g():\n    from .c import x\n")
    layers = {"__init__.py": 2, "low/": 0, "high/": 1}
    graph = import_graph(pkg)
    up = upward_imports(graph, layers)
    assert up == [
        f"{pkg / 'low' / 'a.py'}:2 imports reinforge.high.c (layer 0 low/ -> layer 1 high/)",
        f"{pkg / 'low' / 'b.py'}:3 imports reinforge.high.c (layer 0 low/ -> layer 1 high/)",
    ]
    assert circles(graph) == [
        f"circle of 2 modules: {pkg / 'high' / 'c.py'}:1 imports reinforge.high.d; {pkg / 'high' / 'd.py'}:2 imports reinforge.high.c"
    ]
    assert read_layers("```\n== layer 0: base ==\n  low/  x\n    sub/  y\n== layer 1: top ==\n  high/\n  cli.py  z\n```\n  out/\n") == {
        "low/": 0, "high/": 1, "cli.py": 1,
    }
