"""The house rules of copyprof's source tree, checked on every run (issue 17).

- No import cycle between copyprof modules, counting imports inside functions and under
  ``TYPE_CHECKING`` (a cycle hidden in a function is still a cycle a reader must untangle).
- No module imports another module's private name (``from x import _y``).
- Every Python file stays within 400 lines (readable in one sitting).
- Commands are listed in one place (cli/main.py COMMANDS) and no command module imports the
  CLI group back.
"""
from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "copyprof"
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = list(p.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _imports(mod: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str | None]]:
    """(imported copyprof module, imported name or None) for every import in the file."""
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names if a.name.startswith("copyprof")]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            full = ".".join(base + ([node.module] if node.module else [])) if node.level else (node.module or "")
            if full.startswith("copyprof"):
                found += [(f"{full}.{a.name}" if f"{full}.{a.name}" in modules else full, a.name) for a in node.names]
    return found


def _target(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def test_no_import_cycles() -> None:
    modules = _modules()
    graph = {m: {t for name, _ in _imports(m, p, modules) if (t := _target(name, modules)) and t != m}
             for m, p in modules.items()}
    # iterative Tarjan: strongly connected components of more than one module are cycles
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    cycles.append(sorted(comp))
    assert cycles == []


def test_no_private_names_imported_across_modules() -> None:
    modules = _modules()
    private = [(m, name, what) for m, p in modules.items() for name, what in _imports(m, p, modules)
               if what and what.startswith("_") and not what.startswith("__") and f"{name}" not in modules]
    assert private == []


def test_files_stay_within_400_lines() -> None:
    long = {str(p.relative_to(REPO)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_commands_are_one_list_and_never_import_the_group() -> None:
    from copyprof.cli.main import COMMANDS

    modules = _modules()
    for module, attr in COMMANDS.values():
        assert attr in (PACKAGE.parent / (module.replace(".", "/") + ".py")).read_text()
        imported = {t for name, _ in _imports(module, modules[module], modules) if (t := _target(name, modules))}
        assert "copyprof.cli.main" not in imported, module
