"""The house rules of copyprof's source tree, checked on every run.

- No import cycle between copyprof modules, counting imports inside functions and under
  ``TYPE_CHECKING`` (a cycle hidden in a function is still a cycle a reader must untangle).
- No module imports another module's private name (``from x import _y``).
- No function is longer than ``MAX_FUNCTION_LINES`` unless its docstring says why
  ("Long because ..."): a function is read in one sitting; a file is cut by concept, not length.
- Commands are listed in one place (cli/main.py COMMANDS) and no command module imports the
  CLI group back.
- Kineto is read in one package (readers/kineto); capture has two rooms (capture/vllm, the real
  engine, and capture/replica, ours) that never import each other; the analysis is in rooms that
  name the pipeline and its modules never import a renderer or the CLI.
- Comments and docstrings say why, not when: no issue numbers or commit hashes in the package.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "copyprof"
MAX_FUNCTION_LINES = 60


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


def test_long_functions_say_why() -> None:
    long = []
    for p in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES and "Long because" not in (ast.get_docstring(node) or ""):
                    long.append(f"{p.relative_to(REPO)}:{node.lineno} {node.name} ({n} lines)")
    assert long == []


def test_kineto_is_read_in_one_package() -> None:
    modules = _modules()
    kineto = "copyprof.readers.kineto"
    outside = [m for m in modules if "kineto" in m.rsplit(".", 1)[-1] and not m.startswith(kineto)]
    assert outside == []
    # only the package's entry points are used from outside it: the reader, the chunk pool, the GC guard
    used = {t for m, p in modules.items() if not m.startswith(kineto)
            for name, _ in _imports(m, p, modules) if (t := _target(name, modules)) and t.startswith(kineto)}
    assert used <= {kineto, f"{kineto}.pool", f"{kineto}.columns"}, used


def test_capture_has_two_rooms_that_never_import_each_other() -> None:
    modules = _modules()
    rooms = {"copyprof.capture.vllm", "copyprof.capture.replica"}
    assert rooms <= set(modules)
    for m, p in modules.items():
        for room in rooms:
            if m.startswith(room):
                other = (rooms - {room}).pop()
                hits = [t for name, _ in _imports(m, p, modules) if (t := _target(name, modules)) and t.startswith(other)]
                assert hits == [], (m, hits)


def test_analysis_is_in_rooms_and_imports_no_renderer() -> None:
    modules = _modules()
    flat = sorted(m for m, p in modules.items() if m.startswith("copyprof.analysis.") and m.count(".") == 2
                  and p.name != "__init__.py")
    # the facade (the report, a rank's figures, the ranks side by side, work in a forked child
    # meanwhile) and what every room shares; everything else lives in a room
    assert flat == ["copyprof.analysis.aside", "copyprof.analysis.rank_figures", "copyprof.analysis.rank_pool", "copyprof.analysis.report",
                    "copyprof.analysis.results", "copyprof.analysis.setup", "copyprof.analysis.wording"], flat
    for m, p in modules.items():
        if m.startswith(("copyprof.analysis", "copyprof.stats")):
            bad = [t for name, _ in _imports(m, p, modules) if (t := _target(name, modules))
                   and t.startswith(("copyprof.render", "copyprof.cli"))]
            assert bad == [], (m, bad)


def test_comments_say_why_not_when() -> None:
    # our own history ("issue 18", "since issue 4", "as before"); an upstream source cited at a
    # commit (kineto @ 114171df) is a reason, and stays
    history = re.compile(r"\bissues? #?\d+\b|\bas before\b", re.I)
    files = [*PACKAGE.rglob("*.py"), *(f for f in (REPO / "tests").rglob("*.py") if f.name != "test_house.py"),
             *(f for f in (REPO / "benchmarks").rglob("*.py") if "out" not in f.relative_to(REPO / "benchmarks").parts)]
    # benchmarks/out holds what the benchmarks make (HTA's virtual environment among them): not ours
    hits = [f"{p.relative_to(REPO)}:{i}: {line.strip()[:80]}" for p in files
            for i, line in enumerate(p.read_text().splitlines(), 1) if history.search(line)]
    assert hits == []


def test_commands_are_one_list_and_never_import_the_group() -> None:
    from copyprof.cli.main import COMMANDS

    modules = _modules()
    for module, attr in COMMANDS.values():
        assert attr in (PACKAGE.parent / (module.replace(".", "/") + ".py")).read_text()
        imported = {t for name, _ in _imports(module, modules[module], modules) if (t := _target(name, modules))}
        assert "copyprof.cli.main" not in imported, module
