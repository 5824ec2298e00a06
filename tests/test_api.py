"""harness/api.py, the public Python API, and the GPU campaign (scripts/gpu_*.py) standing on it alone: the
campaign imports no other module of the harness, and no module of scripts/ is in an import cycle."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness import api
from tests.conftest import REPO

PUBLIC = {"harness.api", "harness.cli"}  # what a campaign module may import of the harness
CAMPAIGN = sorted((REPO / "scripts").glob("gpu_*.py"))


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of every import in a file, at any depth (``from a import b`` gives a.b: b may be a
    module), relative imports resolved within scripts/."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = ("scripts." if node.level else "") + (node.module or "")
            found += [(node.lineno, f"{module}.{a.name}".strip(".")) for a in node.names]
    return found


def _beyond_the_api(path: Path) -> list[str]:
    """The imports of the harness in ``path`` that are not of its public API (harness.api and its names, the CLI)."""
    bad = []
    for line, name in _imports(path):
        if name.split(".")[0] != "harness":
            continue
        if name == "harness" or not any(name == p or name.startswith(p + ".") for p in PUBLIC):
            bad.append(f"{path.name}:{line} imports {name}")
    return bad


def test_the_campaign_imports_only_the_public_api():
    assert len(CAMPAIGN) >= 8
    bad = [b for path in CAMPAIGN for b in _beyond_the_api(path)]
    assert bad == [], "the GPU campaign imports harness internals (offer it through harness/api.py):\n" + \
        "\n".join(bad)


def test_an_import_of_an_internal_fails_the_rule(tmp_path):
    # the rule is only as good as the parser: a lazy import inside a function counts, the API does not
    source = tmp_path / "gpu_x.py"
    source.write_text("from harness import api\nimport harness.cli\nfrom harness.api import Sweep\n\n"
                      "def f():\n    from harness.sweeps import rungs\n    import harness.store\n"
                      "    from harness import config\n")
    assert _beyond_the_api(source) == ["gpu_x.py:6 imports harness.sweeps.rungs", "gpu_x.py:7 imports harness.store",
                                       "gpu_x.py:8 imports harness.config"]


def test_no_module_of_scripts_is_in_an_import_cycle():
    graph = {f"scripts.{p.stem}": {n for _, n in _imports(p)} for p in (REPO / "scripts").glob("*.py")}
    graph = {m: {n if n in graph else n.rpartition(".")[0] for n in names} & set(graph) - {m}
             for m, names in graph.items()}
    state: dict[str, int] = {}

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


def test_every_public_name_is_documented_and_typed():
    own = {n for n, o in vars(api).items() if not n.startswith("_") and getattr(o, "__module__", "") == "harness.api"}
    assert own | {"QUEUE_MAX_STEPS"} == set(api.__all__), "a public name not in __all__, or one gone"
    for name in api.__all__:
        obj = getattr(api, name)
        if callable(obj):
            assert (obj.__doc__ or "").strip(), name
        if inspect.isfunction(obj):
            sig = inspect.signature(obj)
            untyped = [p for p in sig.parameters.values() if p.annotation is inspect.Parameter.empty]
            assert not untyped and sig.return_annotation is not inspect.Signature.empty, f"{name}: {untyped}"
        assert name in api.__doc__ or name in ("Sweep", "Turn"), f"{name} missing from the module's list"


def test_importing_the_api_loads_neither_torch_nor_hydra():
    code = textwrap.dedent("""
        import sys
        import harness.api
        print(sorted({m.split(".")[0] for m in sys.modules} & {"torch", "hydra", "omegaconf", "monai"}))
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_ladders_workloads_and_the_store_through_the_api(tmp_path):
    from tests.test_plots import write_sweep

    lad = api.load_ladder("selftest")
    assert (api.ladder_dir() / "selftest.yaml").is_file() and [r.index for r in lad.rungs] == [0, 1, 2, 3]
    assert api.workload("unet3d").sizes["full"].batch_size >= 1 and api.QUEUE_MAX_STEPS > 0
    with pytest.raises(ValueError, match="unknown"):
        api.load_ladder("no_such_ladder")
    results = tmp_path / "results"
    write_sweep(results, "phase2-a")
    runs = api.load_runs(results, columns=["rung", "status"], where={"sweep_id": "phase2-a"})
    assert len(runs) == 8 and set(runs["status"]) == {"ok", "oom"}
    files = sorted(api.runs_dir(results).glob("*.parquet"))
    assert len(files) == 8 and len(api.load_run_files(files)) == 8
    rows = {row.rung: row for row in api.load_table(results, "phase2-a").rows}
    assert api.band_text(rows[1].x_previous).startswith("1.2") and api.band_text(None) == "-"
    assert api.claim_verdict(rows[1].x_previous, 1.1, 1.3)
    assert api.run_command(["table", "--results", str(results), "--sweep", "phase2-a", "--format", "csv"]) == 0
    assert api.run_command(["table", "--results", str(results), "--sweep", "no-such"]) != 0


def test_this_checkout_s_commit_and_code_fingerprint():
    commit, _ = api.git_state(REPO)
    assert len(commit) == 40 or commit == ""
    assert len(api.code_fingerprint()) == 16 and api.code_fingerprint() == api.code_fingerprint(REPO)


def test_open_sweep_refuses_a_bad_setting_and_an_override_of_what_the_ladder_varies(tmp_path):
    with pytest.raises(ValueError, match="batch_size"):
        api.open_sweep("selftest", "s-1", ["batch_size=8"])
    with pytest.raises(ValueError, match="no_such_key"):
        api.open_sweep("selftest", "s-1", ["no_such_key=1"])
    sweep = api.open_sweep("selftest", "s-1", [f"results_dir={tmp_path}", "measure.steps=3"], rounds=2)
    assert (sweep.sweep_id, sweep.ladder.name, sweep.results_dir) == ("s-1", "selftest", str(tmp_path))
