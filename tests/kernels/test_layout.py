"""The shape of the code base, as the architecture promises it: kernels/ as op-family subpackages over a
few machinery modules, no import circle inside kernels/, every family's docstring listing its modules,
and no hand-written module too long to read."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import kernels

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "kernels"
MAX_TOP_LEVEL_MODULES = 10
MAX_MODULE_LINES = 500
FAMILIES = sorted(p.parent.name for p in KERNELS.glob("*/__init__.py") if p.parent.name != "gpu")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _kernel_modules() -> dict[str, Path]:
    return {_module_name(p): p for p in KERNELS.rglob("*.py")}


def _imports(path: Path, known: set[str]) -> set[str]:
    """The kernels modules `path` imports anywhere in it (function bodies too: a deferred import is how a
    circle hides). `from kernels.nn import conv` names the module kernels.nn.conv where there is one."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.startswith("kernels"):
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in known else node.module)
    # Importing a package's module imports the package first; those edges are Python's, not the code's.
    return {m for m in found if m in known and m != "kernels"}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `graph` as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_circle_inside_kernels() -> None:
    modules = _kernel_modules()
    graph = {name: _imports(path, set(modules)) - {name} for name, path in modules.items()}
    assert _cycle(graph) is None, "import circle: " + " -> ".join(_cycle(graph) or [])


def test_the_cycle_check_finds_a_circle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_kernels_top_level_holds_only_the_machinery() -> None:
    top = sorted(p.stem for p in KERNELS.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
    modules = _kernel_modules()
    for name in top:
        if name == "__init__":
            continue
        families = {m.split(".")[1] for m in _imports(KERNELS / f"{name}.py", set(modules))}
        assert not families & set(FAMILIES), f"kernels.{name} is machinery and imports the families {families & set(FAMILIES)}"


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_docstring_lists_its_modules(family: str) -> None:
    package = KERNELS / family
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text()), clean=False) or ""
    assert doc, f"kernels/{family}/__init__.py has no docstring"
    listed = set(re.findall(r"^ {4}([a-z_0-9]+) ", doc, re.M))
    modules = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    assert listed == modules, f"kernels.{family}'s docstring lists {sorted(listed)}, the package has {sorted(modules)}"


def test_the_package_docstring_lists_every_family_and_machinery_module() -> None:
    listed = set(re.findall(r"^ {4}([a-z_]+)/? ", kernels.__doc__, re.M))
    assert listed == set(FAMILIES) | {"gpu"} | {p.stem for p in KERNELS.glob("*.py") if p.stem != "__init__"}


@pytest.mark.parametrize("family", FAMILIES)
def test_importing_kernels_registers_every_family(family: str) -> None:
    # kernels/__init__ walks the subpackages: each family's kernels are registered by `import kernels`.
    registered = {kernels.lookup(op, "cpu" if kernels.has_op(op, "cpu") else "gpu").fn.__module__
                  for op in kernels.registered_ops()}
    defines = [p for p in (KERNELS / family).glob("*.py") if "@kernel(" in p.read_text()]
    assert defines, f"kernels.{family} registers no kernel"
    for path in defines:
        assert _module_name(path) in registered, f"{_module_name(path)} registers nothing on `import kernels`"


def _hand_written(path: Path) -> bool:
    head = path.read_text()[:2000]
    return not path.name.endswith("_pb2.py") and "do not edit by hand" not in head and "DO NOT EDIT" not in head


def test_no_hand_written_module_is_over_500_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for d in ("engine", "kernels", "service") for p in (ROOT / d).rglob("*.py")
            if _hand_written(p) and (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them along their concepts): {long}"
