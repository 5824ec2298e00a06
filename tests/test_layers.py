"""The layout the README and docs/contributing.md claim, checked on the code: commands -> climb, fit -> sweeps ->
session -> run -> workload -> records -> config/store, each layer importing only those below it (climb and fit
neither the other); analysis reads the store (and a ladder's file
through config) and never loads torch or Hydra; Hydra stays in commands/; harness_models/ never import harness; no
import cycle.

The rules are read from every module's imports (ast, lazy imports inside functions included), so a new import that
breaks one fails here, whichever test file covers the module. ONE subprocess runs the analysis commands and the
climb's decisions in a fresh interpreter: imports are lazy, so only running them shows what they load.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO

# The flow, edge first: a module may import its own level and those after it, never one before it.
# session/ is the engine's floor: the measuring commands' policies (sweeps, climb, fit) stand on it, and it on run/.
# api (harness/api.py, what a user's script may import) stands beside the commands: neither imports the other.
FLOW = [{"commands", "api"}, {"climb", "fit"}, {"sweeps"}, {"session"}, {"run"}, {"workload"}, {"records"},
        {"config", "store"}]
LEVEL = {layer: i for i, level in enumerate(FLOW) for layer in level}
EDGE = {"harness", "harness.__main__", "harness.cli"}  # the dispatch, above every layer
# harness/*.py (and conf/, the shipped config groups) beneath every layer: they import none of the harness
HELPERS = {"fileio", "registry", "profiles", "lifeline", "shell", "names", "metrics", "conf"}

# Imports that go against a rule today, each with why: (the importing package or module, the layer it imports).
# Any other breaks the rule; an entry no longer needed is an error too (remove it), so the list only shrinks.
EXCEPTIONS = {
}


def _modules(root: Path) -> dict[str, Path]:
    """Every module of the package at ``root``, by dotted name."""
    out = {}
    for path in root.rglob("*.py"):
        rel = path.relative_to(root.parent).with_suffix("")
        out[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = path
    return out


def _imported(path: Path) -> set[str]:
    """The dotted names a file imports, at any depth (``from a.b import c`` gives a.b and a.b.c)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: a relative import (the layout rules read absolute ones)"
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return names


HARNESS = _modules(REPO / "harness")


def _harness_imports(module: str) -> set[str]:
    """The harness modules ``module`` imports: each name taken to the longest module it names, its own package and
    ancestors left out (``from harness.config import machine`` in harness.config.resolution imports
    harness.config.machine, not harness.config)."""
    found = set()
    for name in _imported(HARNESS[module]):
        while name and name not in HARNESS:
            name = name.rpartition(".")[0]
        if name and name != module and not module.startswith(name + "."):
            found.add(name)
    return found - {"harness"}


def _layer(module: str) -> str:
    return "edge" if module in EDGE else module.split(".")[1]


def _third_party(module: str) -> set[str]:
    return {name.split(".")[0] for name in _imported(HARNESS[module])} - {"harness"}


def _broken(rule) -> tuple[list[str], set[tuple[str, str]]]:
    """``rule(module, layer imported) -> bool`` (True: allowed) over every import: the imports that break it, and the
    exceptions that excused one (an exception that excused none is no longer needed)."""
    broken, used = [], set()
    for module in sorted(HARNESS):
        for target in sorted(_harness_imports(module)):
            if rule(module, _layer(target)):
                continue
            excused = [k for k in EXCEPTIONS if k[1] == _layer(target) and (module + ".").startswith(k[0] + ".")]
            if excused:
                used.add(excused[0])
            else:
                broken.append(f"{module} imports {target}")
    return broken, used


def _flows(module: str, target: str) -> bool:
    """Whether ``module`` may import the layer ``target`` (the flow, and the helpers beneath every layer)."""
    layer = _layer(module)
    if layer in LEVEL and target in LEVEL:
        return LEVEL[target] >= LEVEL[layer]
    if layer in HELPERS:
        return target in HELPERS
    return True


def test_each_layer_of_the_flow_imports_only_the_layers_below_it():
    broken, used = _broken(_flows)
    assert not broken, "against the flow commands -> climb, fit -> sweeps -> session -> run -> workload -> records " \
        "-> config/store:\n" + "\n".join(broken)
    expected = {k for k in EXCEPTIONS if _layer(k[0]) in LEVEL}
    assert used == expected, f"exceptions no longer needed: {sorted(expected - used)}"


def test_layers_on_one_floor_import_neither_the_other_but_config_and_store():
    # climb and fit are two policies over the session: what both need lives below them (session/, config/)
    floors = [level for level in FLOW if len(level) > 1 and level != {"config", "store"}]
    broken = [f"{m} imports {t}" for m in sorted(HARNESS) for t in sorted(_harness_imports(m))
              for level in floors if {_layer(m), _layer(t)} <= level and _layer(m) != _layer(t)]
    assert broken == []


def test_a_new_back_arrow_fails():
    # the flow's rule, asked of imports the code does not have: each one up a floor is refused by name
    assert not _flows("harness.run.parent.runner", "session") and not _flows("harness.session.engine", "sweeps")
    assert not _flows("harness.records.sinks", "run") and not _flows("harness.store.write", "records")
    assert _flows("harness.sweeps.loop", "session") and _flows("harness.session.runner", "records")
    assert not _flows("harness.sweeps.rungs", "api") and _flows("harness.api", "sweeps")  # the public API on top


# Inside the engine's floor (session/) and the run's parent side beneath it, the floors top first: a module imports
# only those on the floors after its own (none on its own floor), and every module of the package stands on one, so
# a new module is placed here and a new back-arrow fails by name.
INSIDE = {
    "harness.session": [{"engine", "probe", "runner"}, {"cache", "events"}],
    "harness.run.parent": [{"runner"}, {"env", "isolate"}, {"launch", "rendezvous", "torch_facts", "watch"},
                           {"launcher", "phases"}, {"lifetime", "zygote"},
                           {"driver", "messages", "processes", "resident", "verdicts"}, {"fingerprint"}],
}


def _floor_of(package: str) -> dict[str, int]:
    return {f"{package}.{m}": i for i, floor in enumerate(INSIDE[package]) for m in floor}


def _back_arrows(package: str, imports: dict[str, set[str]]) -> list[str]:
    """The imports (``module -> harness modules it imports``) of ``package`` that run to its own floor or up."""
    floor = _floor_of(package)
    return [f"{m} imports {t}" for m in sorted(imports) for t in sorted(imports[m])
            if m in floor and t in floor and floor[t] <= floor[m]]


def test_the_engines_floor_and_the_run_beneath_it_import_only_down():
    for package in INSIDE:
        modules = {m for m in HARNESS if m.startswith(package + ".")}
        assert modules == set(_floor_of(package)), f"{package}: place each module on a floor (INSIDE): " \
            f"{sorted(modules ^ set(_floor_of(package)))}"
        assert _back_arrows(package, {m: _harness_imports(m) for m in modules}) == []


def test_a_new_back_arrow_inside_the_engines_floor_or_the_run_fails():
    # imports the code does not have, each refused by name: up a floor, and across one floor
    assert _back_arrows("harness.session", {"harness.session.events": {"harness.session.engine"}}) == [
        "harness.session.events imports harness.session.engine"]
    assert _back_arrows("harness.session", {"harness.session.runner": {"harness.session.probe"}}) != []
    assert _back_arrows("harness.run.parent", {"harness.run.parent.watch": {"harness.run.parent.isolate"},
                                                "harness.run.parent.isolate": {"harness.run.parent.runner"}}) == [
        "harness.run.parent.isolate imports harness.run.parent.runner",
        "harness.run.parent.watch imports harness.run.parent.isolate"]
    assert _back_arrows("harness.run.parent", {"harness.run.parent.isolate": {"harness.run.parent.watch"}}) == []


def test_store_and_config_import_neither_run_nor_sweeps_nor_commands():
    # the flow test holds this too; stated apart because it is what keeps the store readable without torch
    for module in sorted(m for m in HARNESS if _layer(m) in ("store", "config")):
        bad = {_layer(t) for t in _harness_imports(module)} & {"run", "sweeps", "session", "records", "climb", "fit",
                                                                "commands", "analysis"}
        assert not bad, f"{module} imports {sorted(bad)}"


def test_analysis_reads_the_store_and_ladders_alone_and_imports_neither_torch_nor_hydra():
    # config for its ladder reader (harness.config.ladder: a sweep's claims and notes), the floor below sweeps too
    def allowed(module: str, target: str) -> bool:
        return _layer(module) != "analysis" or target in {"analysis", "store", "config"} | HELPERS

    broken, used = _broken(allowed)
    assert not broken, "analysis imports beyond the store and config:\n" + "\n".join(broken)
    assert used == {k for k in EXCEPTIONS if _layer(k[0]) == "analysis"}, "an exception no longer needed"
    for module in sorted(m for m in HARNESS if _layer(m) == "analysis"):
        assert not _third_party(module) & {"torch", "torchvision", "monai", "hydra", "omegaconf"}, module


def test_analysis_packages_import_only_those_before_them_stats_gate_views():
    order = ["stats", "gate", "views"]
    broken = [f"{module} imports {target}" for module in sorted(HARNESS) if module.startswith("harness.analysis.")
              for target in sorted(_harness_imports(module)) if target.startswith("harness.analysis.")
              and order.index(target.split(".")[2]) > order.index(module.split(".")[2])]
    assert broken == []
    assert [p.name for p in (REPO / "harness" / "analysis").glob("*.py")] == ["__init__.py"]


def test_the_measured_process_imports_nothing_of_the_parents_side():
    # run/child/ is what runs in the measured process (and what the code fingerprint covers); the parent reads the
    # child's declarations, never the other way round
    for module in sorted(m for m in HARNESS if m.startswith("harness.run.child")):
        parent = sorted(t for t in _harness_imports(module) if t.startswith("harness.run.parent"))
        assert not parent, f"{module} imports {parent}"


def test_hydra_stays_at_the_edge_in_commands():
    outside = sorted(m for m in HARNESS if "hydra" in _third_party(m) and _layer(m) != "commands")
    assert outside == [], "Hydra imported outside harness/commands/"


def test_models_never_import_harness():
    for module, path in sorted(_modules(REPO / "harness_models").items()):
        assert not any(n == "harness" or n.startswith("harness.") for n in _imported(path)), module


def test_the_harness_package_has_no_import_cycle():
    graph = {m: _harness_imports(m) for m in HARNESS}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for nxt in sorted(graph[module]):
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join(path[path.index(nxt):] + [module, nxt]))
            if nxt not in state:
                visit(nxt, path + [module])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])


MAX_LOCAL_IMPORTS = 30  # imports of the harness inside functions: at the top unless something forbids it


def _local_harness_imports() -> list[tuple[str, int, str]]:
    """(file, line, the line and the one above) of every import of the harness inside a function."""
    found = set()
    for path in sorted(HARNESS.values()):
        lines = path.read_text().splitlines()
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                if any(n == "harness" or n.startswith("harness.") for n in names):
                    found.add((str(path.relative_to(REPO)), node.lineno,
                               lines[node.lineno - 2] + "\n" + lines[node.end_lineno - 1]))
    return sorted(found)


def test_harness_imports_are_at_the_top_and_each_one_kept_inside_a_function_says_why():
    # a reason is what must not load (torch in the sweep's parent, pyarrow for --help, ...) or an order (the
    # lifeline before torch): a comment on the import's line or the line above
    local = _local_harness_imports()
    assert len(local) <= MAX_LOCAL_IMPORTS, "\n".join(f"{f}:{n}" for f, n, _ in local)
    unexplained = [f"{f}:{n}" for f, n, text in local
                   if not any(line.strip().startswith("#") or "  # " in line for line in text.splitlines())]
    assert unexplained == [], "imports inside functions without a reason comment"


def test_the_rules_see_lazy_imports_inside_functions(tmp_path):
    # the rules above are only as good as the parser: an import inside a function body counts
    source = tmp_path / "lazy.py"
    source.write_text("def f():\n    from harness.sweeps import ladder\n    import torch.nn\n")
    assert _imported(source) == {"harness.sweeps", "harness.sweeps.ladder", "torch.nn"}


# ------------------------------------------------------------------------------------------
# what the analysis commands load when they run


ANALYSIS_RUN = """
import importlib, pkgutil, sys
from pathlib import Path

import harness.analysis
from harness import cli

results, out = Path(sys.argv[1]), Path(sys.argv[2])
for info in pkgutil.walk_packages(harness.analysis.__path__, "harness.analysis."):
    importlib.import_module(info.name)
r = str(results)
for argv, code in [
    (["table", "--results", r, "--sweep", "phase2-a"], 0),
    (["table", "--results", r, "--sweep", "phase2-a", "--format", "csv"], 0),
    (["plot", "--results", r, "--sweep", "phase2-a", "--out", str(out / "plots")], 0),
    (["compare", "phase2-a", "phase2-b", "--results", r, "--out", str(out / "compare")], 0),
    (["report", "--results", r, "--sweep", "phase2-a", "--out", str(out / "report.html")], 0),
    (["baseline", "save", "base", "--results", r, "--sweep", "phase2-a"], 0),
    (["baseline", "list", "--results", r], 0),
    (["check", "--baseline", "base", "--results", r, "--sweep", "phase2-b"], 6),  # undecided (default session sd)
    (["store", "info", "--results", r], 0),
    (["store", "verify", "--results", r], 0),
]:
    assert cli.main(argv) == code, argv

from harness.analysis.stats.noise_model import Noise, Runs  # the climb's decisions: no torch either
from harness.climb import ascent, output, space

step = ascent.decide(ascent.Measured("ok", Runs([2.0, 2.02]), Runs([1.0, 1.01])), Noise(), 0.03)
assert step.outcome == ascent.ACCEPTED
assert [a.name for a in space.space("cpu")] and output.training_note("channels_last", False, True) == ""
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"torch", "torchvision", "monai", "hydra", "omegaconf"})
print("LOADED", loaded)
"""


def test_the_analysis_commands_and_the_climbs_decisions_run_without_torch_or_hydra(tmp_path):
    from tests.test_plots import write_sweep

    results = tmp_path / "results"
    write_sweep(results, "phase2-a")
    write_sweep(results, "phase2-b", day=2)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(ANALYSIS_RUN), str(results), str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "LOADED []"
    assert (tmp_path / "report.html").stat().st_size > 0 and (tmp_path / "compare" / "compare.md").exists()
    assert len(list((tmp_path / "plots").glob("*.png"))) == 4


HELP_RUN = """
import sys
from harness import cli

heavy = ("torch", "scipy", "pandas", "pyarrow", "numpy", "psutil", "hydra", "omegaconf", "harness.config")
assert cli.main(["--help"]) == 0
print("HELP", sorted(m for m in heavy if m in sys.modules))
assert cli.main(["sweep", "--help"]) == 0
print("SWEEP_HELP", sorted(m for m in heavy if m in sys.modules))
"""


def test_help_loads_no_library_and_sweep_help_neither_torch_nor_hydra_nor_pandas():
    # the imports moved to the tops of modules must not reach these: the first screens a user sees
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(HELP_RUN)], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith(("HELP", "SWEEP_HELP"))]
    assert lines[0] == "HELP []" and lines[1].startswith("SWEEP_HELP [")
    sweep_help = set(ast.literal_eval(lines[1].split(" ", 1)[1]))
    assert not sweep_help & {"torch", "scipy", "pandas", "hydra", "omegaconf"}, lines[1]
