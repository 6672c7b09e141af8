"""The package's import layers and module sizes (issue 39): a helper shared by two stages lives below both, so
that each stage can be read, tested and changed knowing only what lies beneath it.

Layers, lowest first; a module imports only from its own layer and the layers below it:

  0 foundation  the package root (`__version__`), errors, units, text_safety, canonical_io, layout, output, atomic,
                schema, config, options, targets, kernel_names, markdown_html, heap, blas_kernels, progress: shared by every
                stage, knowing none
  1 ingest      profiler files -> canonical tables
  2 binning     canonical tables -> bins and the rows of the most variable ones
  3 causal      rows -> causal graphs and their verdicts; the share statistics every analysis uses
                (causal.share_test, causal.within_site) and how a causal output reads to a person (causal.describe)
  4 plots       figures of causal outputs, rows and bins; plots.style is what the analyses' own figures share
  5 analyses    findings | ranks | compare, side by side: none imports another
  6 top         explain, demo (planted-truth generators), bench, workflow (the Snakemake layer's helpers), cli,
                schema_cli, config_reference: commands and tools over everything

Imports are read from the source (an AST walk over src/gpuvar), function-level imports included: a lazy
import is still a dependency. Modules named in strings (the CLI's command table, the ingest format table) are
not imports here; both tables sit at the top or inside their own layer.

KNOWN_EXCEPTIONS are the upward imports issue 39 still has to remove, each with its reason. The test fails
when a new one appears, and when a listed one is gone (delete it from the list then).
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "src" / "gpuvar"
MAX_LINES = 600

LAYERS = (
    (
        "foundation",
        {
            "gpuvar",
            "errors",
            "units",
            "text_safety",
            "canonical_io",
            "layout",
            "output",
            "atomic",
            "schema",
            "config",
            "options",
            "targets",
            "kernel_names",
            "markdown_html",
            "heap",
            "blas_kernels",
            "progress",
        },
    ),
    ("ingest", {"ingest"}),
    ("binning", {"binning"}),
    ("causal", {"causal"}),
    ("plots", {"plots"}),
    ("analyses", {"findings", "ranks", "compare"}),
    ("top", {"explain", "demo", "bench", "workflow", "cli", "schema_cli", "config_reference"}),
)
ANALYSES = {"findings", "ranks", "compare"}

# (importer, imported module): why it is still there. Delete an entry when its import is gone.
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The gpuvar modules one import statement loads (`from gpuvar.x import y` is gpuvar.x.y when y is a module)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name.split(".")[0] == "gpuvar"]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: from the importer's package
        package = module.split(".") if is_package else module.split(".")[:-1]
        base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
    if base.split(".")[0] != "gpuvar":
        return []
    return [f"{base}.{alias.name}" if _is_module(f"{base}.{alias.name}") else base for alias in node.names]


def import_graph() -> list[tuple[str, str, int]]:
    """(importer, imported module, line) of every import of a gpuvar module inside src/gpuvar."""
    edges = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _imported(node, module, path.name == "__init__.py"):
                edges.add((module, target, node.lineno))
    return sorted(edges)


def unit_of(module: str) -> str:
    """The package a module belongs to (gpuvar.ingest.ncu -> ingest) or the top-level module's own name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_of(module: str) -> int:
    unit = unit_of(module)
    for rank, (_, units) in enumerate(LAYERS):
        if unit in units:
            return rank
    raise AssertionError(f"{module}: {unit!r} has no declared layer; add it to LAYERS in tests/test_layers.py")


def violations(edges) -> list[tuple[str, str, int, str]]:
    """(importer, imported, line, why) of every import that breaks the layer order."""
    out = []
    for importer, imported, line in edges:
        low, high = layer_of(imported), layer_of(importer)
        a, b = unit_of(importer), unit_of(imported)
        if low > high:
            out.append((importer, imported, line, f"{LAYERS[high][0]} imports {LAYERS[low][0]}"))
        elif a != b and a in ANALYSES and b in ANALYSES:
            out.append((importer, imported, line, f"analysis {a} imports analysis {b}"))
    return out


def test_every_module_has_a_declared_layer():
    modules = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    assert len(modules) > 100
    for module in sorted(modules):
        layer_of(module)


def test_the_import_walk_sees_lazy_and_aliased_imports():
    """The walk counts what the layer test relies on: a function-level import, `from gpuvar import x` naming a
    module, and `from package import module as alias` (the test would pass vacuously otherwise)."""
    edges = {(a, b) for a, b, _ in import_graph()}
    assert ("gpuvar.plots.cli", "gpuvar.plots.causal_graph.folder") in edges  # inside run()
    assert ("gpuvar.binning.link", "gpuvar.targets") in edges  # from gpuvar import targets as T
    assert ("gpuvar.findings.run", "gpuvar.causal.share_test") in edges  # from gpuvar.causal import share_test as V
    assert ("gpuvar.findings.run", "gpuvar") in edges  # from gpuvar import __version__


def test_no_import_runs_from_a_lower_layer_to_a_higher_one_and_the_analyses_stand_side_by_side():
    found = violations(import_graph())
    new = [f"{a}:{line} -> {b} ({why})" for a, b, line, why in found if (a, b) not in KNOWN_EXCEPTIONS]
    assert not new, "upward imports (move the shared code down to the lower layer):\n" + "\n".join(new)
    fixed = set(KNOWN_EXCEPTIONS) - {(a, b) for a, b, _, _ in found}
    assert not fixed, f"no longer imported: delete from KNOWN_EXCEPTIONS: {sorted(fixed)}"


def test_no_import_cycle_between_packages():
    graph: dict[str, set[str]] = {}
    for importer, imported, _ in import_graph():
        a, b = unit_of(importer), unit_of(imported)
        graph.setdefault(a, set())
        if a != b:
            graph[a].add(b)
    try:
        list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        raise AssertionError(f"import cycle between packages: {' -> '.join(exc.args[1])}") from None


def test_a_new_upward_import_is_caught():
    """What the layer test does with an import it has not seen: causal reaching up into findings, plots into
    compare, and one analysis into another are each reported; an import downwards is not."""
    planted = [
        ("gpuvar.causal.verdict", "gpuvar.findings.decompose", 1),
        ("gpuvar.plots.causal_graph.captions", "gpuvar.compare.kernels", 2),
        ("gpuvar.compare.run", "gpuvar.findings.report", 3),
        ("gpuvar.findings.run", "gpuvar.causal.describe", 4),
    ]
    assert [line for _, _, line, _ in violations(planted)] == [1, 2, 3]


def test_no_module_is_over_600_lines():
    sizes = {p.relative_to(PACKAGE.parent): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    big = {str(p): n for p, n in sorted(sizes.items()) if n > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines (split them by job): {big}"
