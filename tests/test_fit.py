"""``python -m harness fit`` with a faked runner (no child processes): a test double that runs out of memory above a
size; the search finds the boundary in O(log n) runs, the sizes that fit are measured as a sweep whose first round
is the search's own runs, the curve names the largest and the fastest, and a fit run again resumes."""

from __future__ import annotations

import contextlib
import math

import pytest

from harness import config as config_mod
from harness.analysis.views import table as table_mod
from harness.session.events import Display
from harness.fit import search as search_mod
from harness.fit import session
from harness.fit.search import FitConfig
from harness.session.probe import search
from harness.run.parent import runner
from harness.records.make import make_record
from harness.store import load_runs, store_record
from harness.sweeps import loop
from tests.conftest import TINY_MODEL, in_process

MIB = 2**20


@pytest.mark.parametrize("boundary", [1, 5, 8, 24, 100, 1000])
def test_the_search_finds_the_boundary_in_o_log_n_runs(boundary):
    tried: list[int] = []

    def try_size(size):
        tried.append(size)
        return "ok" if size <= boundary else "oom"

    found = search(try_size, 1, 1024)
    assert found.largest == boundary and found.smallest_oom == boundary + 1
    assert len(tried) <= 2 * math.ceil(math.log2(boundary + 1)) + 1 and len(set(tried)) == len(tried)
    assert found.stopped == f"batch_size={boundary} fits and batch_size={boundary + 1} runs out of memory"


def test_without_a_boundary_the_search_runs_to_fit_max_and_includes_it():
    found = search(lambda size: "ok", 1, 12)
    assert [s for s, _ in found.tried] == [1, 2, 4, 8, 12] and found.stopped == "every size up to fit.max=12 fits"


def test_a_failure_that_is_not_memory_ends_the_search_and_says_so():
    found = search(lambda size: "ok" if size < 4 else "timeout", 1, 64)
    assert found.fits == [1, 2] and found.stopped.startswith("batch_size=4 ended timeout: the search stops")


@pytest.mark.parametrize("options, says", [
    (FitConfig(max=0), "fit.max=0 must be a whole number >= 1"),
    (FitConfig(min=8, max=4), "fit.max=4 is below fit.min=8"),
])
def test_bad_fit_settings_name_the_value(options, says):
    with pytest.raises(ValueError, match=says):
        search_mod.check(options)


def _throughput(batch: int) -> float:
    return 100.0 * batch / (1 + (batch / 12) ** 2)  # rises, peaks near 12-16, falls: the fastest is not the largest


class FakeAllocator:
    """Stands in for ``runner.store_asked``: a run over ``fits`` samples a step ends ``oom``; one that fits is ok,
    its samples/s a curve of the batch and its peak host memory 100 MiB + 10 MiB a sample. Every record stored."""

    def __init__(self, fits: int):
        self.fits, self.calls = fits, []

    def __call__(self, cfg, env, env_key, on_progress=None, skip_reason=None, pipeline=None, **fields):
        self.calls.append((cfg.batch_size, fields.get("ladder")))
        status = "oom" if cfg.batch_size > self.fits else "ok"
        record = make_record(cfg, env, env_key, status, "CUDA out of memory" if status == "oom" else "",
                                     **fields)
        if status == "ok":
            wobble = 1 + 0.002 * (len(self.calls) % 3)
            record.samples_per_s = _throughput(cfg.batch_size) * wobble
            record.step_ms = [1000.0 * cfg.batch_size / record.samples_per_s] * 10
            record.peak_host_rss_bytes = (100 + 10 * cfg.batch_size) * MIB
            record.other_cpu_pct, record.cpu_count, record.cpu_model = 1.0, 2, "cpu"
        store_record(record, cfg.results_dir)
        return record


class Lines:
    """The fit's and its sweep's displays, as lists."""

    def __init__(self):
        self.lines: list[str] = []

    def say(self, text):
        self.lines.append(str(text))

    def on(self, event):  # a listener of the sweep's events (harness.session.events)
        if event.kind == "already":
            self.already_measured(event.turn)
        elif event.kind == "failed":
            self.could_not_run(event.turn, event.error)
        elif event.text:
            self.say(event.text)

    def already_measured(self, turn):
        self.lines.append(f"already {turn.label}")

    def could_not_run(self, turn, exc):
        raise AssertionError(f"could not run {turn}: {exc}")


@contextlib.contextmanager
def _progress(label):
    yield type("Progress", (), {"update": lambda self, *a, **k: None})()


@pytest.fixture
def allocator(monkeypatch):
    fake = FakeAllocator(fits=24)
    monkeypatch.setattr(runner, "store_asked", fake)
    monkeypatch.setattr(loop.launcher, "warm", lambda: contextlib.nullcontext(
        type("Session", (), {"begin": lambda self, cfg: None})()))
    return fake


def _fit(results, lines: Lines, options: FitConfig) -> int:
    settings = config_mod.to_dict(config_mod.from_dict({**TINY_MODEL, "measure.steps": 2, "measure.warmup_steps": 1,
                                                        "results_dir": str(results), "sweep.repeats": 2,
                                                        "sweep.remeasure_busy": False}))
    return session.run_fit(settings, options, Display(say=lines.say, progress=_progress), lines, [])


def test_fit_finds_the_boundary_in_few_fresh_runs_and_measures_the_sizes_that_fit(results, allocator, capsys):
    lines = Lines()
    assert _fit(results, lines, FitConfig(max=64)) == 0
    searched = [size for size, ladder in allocator.calls if ladder == "fit"]
    assert searched == [1, 2, 4, 8, 16, 32, 24, 28, 26, 25]  # doubling, then bisecting 16..32: 10 runs for 64
    measured = [size for size, ladder in allocator.calls if ladder != "fit"]
    assert sorted(measured) == [1, 2, 4, 8, 16, 24]  # round 2; round 1 is the search's runs, copied
    frame = load_runs(results)
    sweep = frame[frame["ladder"].str.startswith("fit-")]
    assert len(sweep) == 12 and (sweep["status"] == "ok").all()
    assert (sweep[sweep["round"] == 0]["cached_from"] != "").all()
    out = capsys.readouterr().out
    assert "| batch_size | samples/s [95% band] | runs | peak host RSS GiB |" in out
    row = next(line for line in out.splitlines() if line.startswith("| 24 | "))
    speed = float(row.split("|")[2].split()[0])
    assert speed == pytest.approx(480.0, rel=0.01) and row.endswith("| 2 | 0.33 |")  # 100 + 240 MiB
    assert "Largest that fits: batch_size=24 (batch_size=24 fits and batch_size=25 runs out of memory)." in out
    assert "Fastest: batch_size=16" in out
    search_id = frame[frame["ladder"] == "fit"]["sweep_id"].iloc[0]
    listed = table_mod.load_table(str(results), search_id)  # `table --sweep <fit id>` lists the search's runs
    assert [(r.change, r.status) for r in listed.rows][-2:] == [("batch_size=26", "oom"), ("batch_size=25", "oom")]


def test_a_fit_run_again_resumes_and_measures_nothing_twice(results, allocator, capsys):
    assert _fit(results, Lines(), FitConfig(max=64)) == 0
    calls = len(allocator.calls)
    lines = Lines()
    assert _fit(results, lines, FitConfig(max=64)) == 0
    assert len(allocator.calls) == calls
    assert any(line.startswith("resuming fit") for line in lines.lines)
    assert "Largest that fits: batch_size=24" in capsys.readouterr().out


def test_the_fit_command_refuses_bad_settings_before_anything_runs(results, capfd):
    out = in_process(capfd, "fit", "fit.max=0", f"results_dir={results}")
    assert out.returncode == 2 and "fit.max=0 must be a whole number >= 1" in out.stderr
    assert "Traceback" not in out.stderr and not (results / "runs").exists()
    other = in_process(capfd, "run", "fit.max=4", f"results_dir={results}")
    assert other.returncode == 2 and "'fit.max=4' is a setting of `python -m harness fit`" in other.stderr


def test_on_a_cpu_a_fit_under_memory_limit_gb_is_refused_with_the_reason_before_anything_runs(results, allocator,
                                                                                              capsys):
    settings = config_mod.to_dict(config_mod.from_dict({**TINY_MODEL, "results_dir": str(results),
                                                        "memory.limit_gb": 24.0}))
    lines = Lines()
    assert session.run_fit(settings, FitConfig(max=4), Display(say=lines.say, progress=_progress), lines, []) == 2
    assert capsys.readouterr().err.strip() == (
        "error: these settings cannot run here: memory.limit_gb=24 needs a CUDA GPU (it caps the device's caching "
        "allocator; a CPU run's host memory has no allocator to cap)")
    assert allocator.calls == [] and not list(results.glob("**/*.parquet"))


TINY_3D = {**TINY_MODEL, "workload.model._target_": "torch.nn.Conv3d", "workload.input_shape": [1, 32, 32, 32],
           "workload.patch_multiple": 16, "workload.min_side": 16, "workload.unit": "voxels",
           "workload.units_per_sample": "spatial"}


class FakePatchAllocator(FakeAllocator):
    """A run over ``fits`` voxels a sample ends ``oom``; samples/s falls with the voxels, slower than they grow."""

    def __call__(self, cfg, env, env_key, on_progress=None, skip_reason=None, pipeline=None, **fields):
        voxels = math.prod(cfg.data.patch_size)
        self.calls.append((list(cfg.data.patch_size), fields.get("ladder")))
        status = "oom" if voxels > self.fits else "ok"
        record = make_record(cfg, env, env_key, status, "CUDA out of memory" if status == "oom" else "",
                                     **fields)
        if status == "ok":
            record.samples_per_s = 1e6 / voxels ** 0.9 * (1 + 0.002 * (len(self.calls) % 3))
            record.step_ms = [1000.0 * cfg.batch_size / record.samples_per_s] * 10
            record.peak_host_rss_bytes = (100 + voxels // 1000) * MIB
            record.other_cpu_pct, record.cpu_count, record.cpu_model = 1.0, 2, "cpu"
        store_record(record, cfg.results_dir)
        return record


def _fit_3d(results, lines: Lines, options: FitConfig, **over) -> int:
    settings = config_mod.to_dict(config_mod.from_dict({**TINY_3D, "measure.steps": 2, "measure.warmup_steps": 1,
                                                        "results_dir": str(results), "sweep.repeats": 2,
                                                        "sweep.remeasure_busy": False, **over}))
    return session.run_fit(settings, options, Display(say=lines.say, progress=_progress), lines, [])


def test_the_patch_axis_searches_valid_patches_and_reports_voxels_per_s(results, allocator, monkeypatch, capsys):
    fake = FakePatchAllocator(fits=100 ** 3)  # 96^3 fits, 112^3 does not
    monkeypatch.setattr(runner, "store_asked", fake)
    lines = Lines()
    assert _fit_3d(results, lines, FitConfig(axis="patch", max=256)) == 0
    searched = [patch[0] for patch, ladder in fake.calls if ladder == "fit"]
    assert searched == [16, 32, 64, 128, 96, 112]  # sides in steps of 16: doubling, then bisecting 64..128
    assert all(patch == [patch[0]] * 3 for patch, _ in fake.calls)
    out = capsys.readouterr().out
    assert "| data.patch_size | samples/s [95% band] | voxels/s | runs | peak host RSS GiB |" in out
    row = next(line for line in out.splitlines() if line.startswith("| [96,96,96] | "))
    speed, voxels = float(row.split("|")[2].split()[0]), float(row.split("|")[3])
    assert voxels == pytest.approx(speed * 96 ** 3, rel=0.01)
    assert ("Largest that fits: data.patch_size=[96,96,96] (data.patch_size=[96,96,96] fits and "
            "data.patch_size=[112,112,112] runs out of memory).") in out
    assert "Fastest: data.patch_size=[96,96,96]" in out  # by voxels/s: samples/s is fastest at the smallest patch
    said = next(line for line in lines.lines if "patch_size=" in line and "16,16,16]] ok" in line)
    assert said.endswith(f"samples/s, {float(said.split()[-4]) * 16 ** 3:.3g} voxels/s")


def test_the_patch_axis_keeps_the_start_aspect_in_valid_steps():
    from harness.fit.axes import patch_axis, patch_steps

    axis = patch_axis("w", [32, 64, 64], 3, 16)
    assert axis.value(1) == [16, 32, 32] and axis.value(3) == [48, 96, 96] and axis.units(2) == 32 * 64 * 64
    assert patch_steps(axis, 32, 32, 1, None, "cpu") == (2, 4)  # min_side 32 up; 2x the start's 32 down
    assert patch_axis("w", [112, 112, 112], 3, 1).step == 8  # a model that takes any side: steps of 8
    with pytest.raises(ValueError, match=r"fit.max=20 leaves no patch to try: .* give fit.max >= 32"):
        patch_steps(axis, 32, 32, 1, 20, "cpu")


def test_a_workload_without_a_patch_refuses_the_patch_axis_before_anything_runs(results, allocator, capsys):
    assert _fit(results, Lines(), FitConfig(axis="patch")) == 2
    assert capsys.readouterr().err.strip() == (
        "error: fit.axis=patch needs a workload with a 3D patch (data.patch_size); workload 'custom' has none (1D "
        "samples): valid fit.axis for it: batch")
    assert allocator.calls == [] and not list(results.glob("**/*.parquet"))
    with pytest.raises(ValueError, match="fit.axis"):
        search_mod.check(FitConfig(axis="width"))
