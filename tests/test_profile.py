"""Profiles per rung: taken after the measured window, summarised, capped, read back, diffed and shown."""

from __future__ import annotations

import dataclasses
import gzip
import importlib
import itertools
import json
from types import SimpleNamespace

import pyarrow as pa
import pytest
import torch
from torch import nn

from harness import store
from harness.analysis.views.profile import bound_by, diff_profiles, profile_html, reading, render_diff, render_profile
from harness.commands import profile as profile_command
from harness.profiles import (CompileStats, OperatorTime, ProfileSummary, TraceInfo, store_trace, summary_from_json)
from harness.run.child import profiling
from harness.run.child.profiling import MARKERS, StepParts, busy_time, compile_stats, marked_step, profile_steps

CPU = torch.device("cpu")


def tiny_parts(log_every: int = 0) -> StepParts:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 2))
    batch = (torch.randn(2, 1, 8, 8), torch.randint(0, 2, (2,)))
    return StepParts(model=model, loss_fn=nn.CrossEntropyLoss(), optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                     batches=itertools.repeat(batch), device=CPU, log_every=log_every)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("profiles")
    summary = profile_steps(marked_step(tiny_parts(log_every=2)), 3, CPU, out, run_id="r1")
    return summary, out


def test_profile_of_a_small_conv_net_names_its_operators_and_phases(profiled):
    summary, _ = profiled
    assert summary.error == "" and summary.device == "cpu" and summary.steps == 3
    names = [op.name for op in summary.top_cpu]
    assert "aten::convolution_backward" in names
    assert not any(n.startswith(("ProfilerStep", "harness.")) for n in names)  # steps and markers are not operators
    assert summary.span_ms > 0 and summary.step_ms == pytest.approx(summary.span_ms / 3)
    shares = summary.host_shares()
    assert set(shares) == {"data_wait", "copy", "forward", "backward", "optimizer", "other"}
    assert sum(shares.values()) == pytest.approx(1.0, abs=1e-6)
    assert shares["forward"] > 0 and shares["backward"] > 0 and shares["optimizer"] > 0
    assert summary.device_ms is None and summary.top_device == [] and summary.compile is None
    calls = {op.name: op.calls for op in summary.top_cpu}
    assert calls["aten::convolution_backward"] == 3  # one per profiled step: the profiler's warm-up step is not kept


def test_trace_is_gzipped_json_with_the_phase_markers(profiled):
    summary, out = profiled
    assert summary.trace.status == "written" and summary.trace.path == "r1.trace.json.gz"
    path = out / summary.trace.path
    assert summary.trace.bytes == path.stat().st_size
    trace = json.loads(gzip.decompress(path.read_bytes()))
    names = {e.get("name") for e in trace["traceEvents"]}
    assert set(MARKERS.values()) <= names
    assert not list(out.glob(".*"))  # no temporary file left behind


def test_summary_round_trips_through_json(profiled):
    summary, _ = profiled
    assert summary_from_json(summary.to_json()) == summary
    assert summary_from_json("") is None
    with pytest.raises(ValueError, match="not a profile summary"):
        summary_from_json('{"a": 1}')


def test_trace_over_the_cap_is_cut_to_a_loadable_trace_or_dropped(tmp_path):
    full = profile_steps(marked_step(tiny_parts()), 2, CPU, tmp_path, run_id="full")
    limit = full.trace.bytes // 2
    cut = profile_steps(marked_step(tiny_parts()), 2, CPU, tmp_path, run_id="cut", trace_limit_bytes=limit)
    assert cut.trace.status == "truncated" and 0 < cut.trace.bytes <= limit
    trace = json.loads(gzip.decompress((tmp_path / cut.trace.path).read_bytes()))
    assert trace["traceEvents"] and "truncated" in trace["otherData"]["harness"]
    assert "truncated" in cut.trace.note
    dropped = profile_steps(marked_step(tiny_parts()), 2, CPU, tmp_path, run_id="none", trace_limit_bytes=10)
    assert dropped.trace.status == "dropped" and dropped.trace.path == "" and "over the cap" in dropped.trace.note
    assert not (tmp_path / "none.trace.json.gz").exists()
    assert dropped.top_cpu  # the summary is kept whatever happens to the trace


def test_profiler_is_off_in_the_measured_steps_and_on_only_in_the_profiled_ones(tmp_path):
    seen = []
    step = marked_step(tiny_parts())

    def watched(index: int) -> None:
        seen.append((index, torch.autograd.profiler._is_profiler_enabled, torch._C._autograd._profiler_enabled()))
        step(index)

    for index in range(3):  # the measured part, before profile_steps
        watched(index)
    profile_steps(watched, 2, CPU, None, first_step=3)
    watched(6)
    assert [s[1:] for s in seen[:3]] == [(False, False)] * 3
    assert [s[2] for s in seen[3:6]] == [False, True, True]  # the profiler's own warm-up step records nothing
    assert seen[6][1:] == (False, False)
    assert [s[0] for s in seen] == list(range(7))
    # Importing the module (the child does, after the window) hooks nothing into every optimizer step.
    assert not importlib.import_module("torch.optim.optimizer")._global_optimizer_post_hooks


def test_failed_profile_says_why_and_does_not_raise():
    def broken(index: int) -> None:
        raise RuntimeError("out of memory in the profiled step")

    summary = profile_steps(broken, 2, CPU, None)
    assert "out of memory in the profiled step" in summary.error and bound_by(summary) == "unknown"
    assert "no profile" in render_profile(summary)


def _event(name, start, end, device="cpu", kernels=(), annotation=False):
    kind = torch.autograd.DeviceType.CUDA if device == "cuda" else torch.autograd.DeviceType.CPU
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end), device_type=kind,
                           is_user_annotation=annotation,
                           kernels=[SimpleNamespace(duration=d) for d in kernels])


def test_cuda_breakdown_attributes_kernels_to_phases_and_counts_idle():
    """Two 100 ms steps (microseconds, as the profiler gives them): per step 20 ms of forward kernels, 30 of
    backward (launched from the autograd engine's thread while the main thread is in the backward marker), 5 of
    optimizer: 55 busy, 45 idle."""
    events = []
    for base in (0, 100_000):
        events += [_event("ProfilerStep*", base, base + 100_000),
                   _event(MARKERS["data_wait"], base, base + 10_000),
                   _event(MARKERS["forward"], base + 10_000, base + 40_000),
                   _event(MARKERS["backward"], base + 40_000, base + 90_000),
                   _event(MARKERS["optimizer"], base + 90_000, base + 95_000),
                   _event("aten::conv", base + 15_000, base + 16_000, kernels=[20_000]),
                   _event("aten::conv_bwd", base + 50_000, base + 51_000, kernels=[30_000]),
                   _event("aten::add_", base + 91_000, base + 91_500, kernels=[5_000]),
                   _event("kernel_fwd", base + 20_000, base + 40_000, "cuda"),
                   _event("kernel_bwd", base + 55_000, base + 85_000, "cuda"),
                   _event("kernel_opt", base + 92_000, base + 97_000, "cuda"),
                   # the profiler's copies of the ranges on the device's timeline: neither phases nor busy time
                   _event(MARKERS["forward"], base + 20_000, base + 40_000, "cuda", annotation=True),
                   _event("ProfilerStep*", base + 20_000, base + 97_000, "cuda", annotation=True)]
    cpu, cuda = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA
    averages = [SimpleNamespace(key="aten::conv", count=2, self_cpu_time_total=2_000, self_device_time_total=40_000,
                                device_type=cpu),
                SimpleNamespace(key="aten::conv_bwd", count=2, self_cpu_time_total=2_000,
                                self_device_time_total=60_000, device_type=cpu),
                SimpleNamespace(key="aten::add_", count=2, self_cpu_time_total=1_000, self_device_time_total=10_000,
                                device_type=cpu),
                SimpleNamespace(key="kernel_bwd", count=2, self_cpu_time_total=0, self_device_time_total=60_000,
                                device_type=cuda),
                SimpleNamespace(key=MARKERS["forward"], count=2, self_cpu_time_total=500, self_device_time_total=0,
                                device_type=cpu)]
    s = profiling.summarize_events(events, averages, "cuda", 2, MARKERS)
    assert s.step_ms == pytest.approx(100.0)
    assert s.device_ms == pytest.approx({"forward": 20.0, "backward": 30.0, "optimizer": 5.0, "other": 0.0,
                                         "idle": 45.0})
    assert s.host_ms["data_wait"] == pytest.approx(10.0) and s.host_ms["backward"] == pytest.approx(50.0)
    assert sum(s.host_ms.values()) == pytest.approx(100.0)
    assert [op.name for op in s.top_device] == ["aten::conv_bwd", "aten::conv", "aten::add_"]  # no kernel rows
    assert s.top_device[0].total_ms == pytest.approx(60.0) and s.top_device[0].share == pytest.approx(0.3)
    assert bound_by(s) == "compute-bound"


def test_busy_time_is_the_union_of_overlapping_kernels():
    assert busy_time([(0, 10), (5, 15), (20, 30)], 0, 100) == 25
    assert busy_time([(0, 10), (2, 4)], 0, 100) == 10
    assert busy_time([(-5, 5), (95, 120)], 0, 100) == 10  # clipped to the span


def test_compile_stats_count_breaks_and_recompiles_while_profiling():
    before = {"frames": {"total": 4}}
    after = {"graph_break": {"print\nmore detail": 3, "data-dependent branch": 1}, "stats": {"unique_graphs": 5},
             "frames": {"total": 6}}
    c = compile_stats(before, after)
    assert c == CompileStats(graph_breaks=4, unique_graphs=5, frames_compiled=6, recompiles_while_profiling=2,
                             break_reasons=["3x print", "1x data-dependent branch"])


def synthetic(step_ms: float, host: dict, ops: dict, device_ms: dict | None = None, steps: int = 2,
              run_id: str = "") -> ProfileSummary:
    host = {"data_wait": 0.0, "copy": 0.0, "forward": 0.0, "backward": 0.0, "optimizer": 0.0, **host}
    host["other"] = step_ms - sum(host.values())
    rows = [OperatorTime(name, steps, ms * steps, ms / step_ms) for name, ms in ops.items()]
    return ProfileSummary(device="cuda" if device_ms else "cpu", steps=steps, span_ms=step_ms * steps, host_ms=host,
                          device_ms=device_ms, top_cpu=rows, top_device=rows if device_ms else [], run_id=run_id)


FP32 = synthetic(120.0, {"data_wait": 31.0, "forward": 30.0, "backward": 50.0},
                 {"aten::convolution_backward": 41.0, "aten::convolution": 20.0, "aten::add_": 2.0})
BF16 = synthetic(80.0, {"data_wait": 31.2, "forward": 15.0, "backward": 28.0},
                 {"aten::convolution_backward": 18.0, "aten::convolution": 12.0, "aten::add_": 2.05})


def test_diff_names_the_operator_that_changed_most_and_the_unchanged_data_wait():
    diff = diff_profiles(FP32, BF16, ("fp32", "bf16"))
    assert diff.operators[0].name == "aten::convolution_backward"
    assert diff.operators[0].delta_ms == pytest.approx(-23.0)
    assert diff.operators[-1].name == "aten::add_" and diff.operators[-1].unchanged
    assert reading(diff) == ("bf16: step 120 -> 80 ms; convolution backward 41 -> 18 ms, convolution 20 -> 12 ms; "
                             "data wait unchanged at 31 ms; compute-bound -> data-bound")  # 26% -> 39% waiting
    text = render_diff(diff)
    assert text.splitlines()[0] == reading(diff)
    assert "aten::convolution_backward" in text and "bound: compute-bound -> data-bound" in text


def test_diff_of_an_operator_only_one_side_lists():
    after = synthetic(80.0, {"data_wait": 31.0}, {"aten::_to_copy": 9.0, "aten::convolution": 20.0})
    diff = diff_profiles(FP32, after, ("fp32", "cast"))
    first = diff.operators[0]
    assert first.name == "aten::convolution_backward" and first.after_ms is None
    assert "41 ms -> out of the top operators" in reading(diff)
    new = next(c for c in diff.operators if c.name == "aten::_to_copy")
    assert new.before_ms is None and new.delta_ms == pytest.approx(9.0)
    with pytest.raises(ValueError, match="broken has no profile to compare: profiling failed"):
        diff_profiles(FP32, ProfileSummary("cpu", 2, 0.0, {}, error="profiling failed"), ("fp32", "broken"))


def test_bound_by_reads_the_breakdown():
    assert bound_by(synthetic(100.0, {"data_wait": 40.0}, {})) == "data-bound"
    launch = {"forward": 10.0, "backward": 15.0, "optimizer": 5.0, "other": 0.0, "idle": 70.0}
    assert bound_by(synthetic(100.0, {"data_wait": 5.0}, {}, device_ms=launch)) == "launch-bound"
    busy = {"forward": 30.0, "backward": 50.0, "optimizer": 10.0, "other": 0.0, "idle": 10.0}
    assert bound_by(synthetic(100.0, {"data_wait": 5.0}, {}, device_ms=busy)) == "compute-bound"
    assert bound_by(synthetic(100.0, {"data_wait": 35.0}, {}, device_ms=launch)) == "data-bound"
    assert bound_by(synthetic(100.0, {"data_wait": 5.0}, {})) == "compute-bound"  # CPU: no device to idle
    assert bound_by(json.loads(BF16.to_json())) == "data-bound"  # the record's JSON object is read as well


def test_render_profile_shows_breakdown_operators_and_trace(profiled):
    summary, _ = profiled
    text = render_profile(summary, title="rung 0")
    assert text.startswith("rung 0: cpu, 3 profiled steps")
    assert "step breakdown (host): data wait" in text and "backward" in text
    assert "top operators by self CPU time:" in text and "aten::convolution_backward" in text
    assert "trace: r1.trace.json.gz" in text and "ui.perfetto.dev" in text


def test_profile_html_draws_a_bar_per_rung_and_links_traces():
    cuda = synthetic(100.0, {"data_wait": 5.0, "forward": 30.0, "backward": 50.0}, {"aten::<lambda>": 20.0},
                     device_ms={"forward": 20.0, "backward": 30.0, "optimizer": 5.0, "other": 0.0, "idle": 45.0})
    page = profile_html({"0 fp32": FP32, "1 bf16": json.loads(BF16.to_json()), "2 cuda": cuda, "3 none": ""},
                        trace_links={"0 fp32": "profiles/a b.trace.json.gz"})
    assert page.count('class="profiles"') == 1 and "<script" not in page
    assert page.count("0 fp32") == 1 and "1 bf16" in page and "3 none" not in page
    assert 'width:25.83%' in page  # fp32's data wait: 31 of 120 ms
    assert 'width:45.00%' in page  # the CUDA rung's device idle
    assert 'href="profiles/a b.trace.json.gz"' in page
    assert "aten::&lt;lambda&gt;" in page and "aten::<lambda>" not in page
    assert profile_html({}) == ""


def test_store_trace_moves_the_childs_trace_into_the_results_folder(tmp_path):
    job, results = tmp_path / "job", tmp_path / "results"
    job.mkdir()
    (job / "profile.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}'))
    summary = dataclasses.replace(FP32, trace=TraceInfo(path="profile.trace.json.gz", bytes=40, status="written"))
    profile_json, trace = store_trace(summary.to_json(), job, results, "run7")
    assert trace == "profiles/run7.trace.json.gz" and (results / trace).is_file()
    assert not (job / "profile.trace.json.gz").exists()
    kept = summary_from_json(profile_json)
    assert kept.run_id == "run7" and kept.trace.path == trace
    assert store_trace("", job, results, "run8") == ("", "")
    untraced, trace = store_trace(FP32.to_json(), job, results, "run9")
    assert trace == "" and summary_from_json(untraced).run_id == "run9"


def test_store_trace_copies_across_file_systems(tmp_path, monkeypatch):
    from harness import profiles

    monkeypatch.setattr(profiles, "_same_device", lambda source, folder: False)
    job, results = tmp_path / "job", tmp_path / "results"
    job.mkdir()
    (job / "profile.trace.json.gz").write_bytes(b"trace")
    summary = dataclasses.replace(FP32, trace=TraceInfo(path="profile.trace.json.gz", bytes=5, status="written"))
    _, trace = store_trace(summary.to_json(), job, results, "run7")
    assert (results / trace).read_bytes() == b"trace" and not (job / "profile.trace.json.gz").exists()
    assert [f.name for f in (results / "profiles").iterdir()] == ["run7.trace.json.gz"]  # no partial file left


@pytest.fixture
def profile_store(monkeypatch):
    """The store with the record's two profile columns; does nothing once the record carries them."""
    if "profile_json" in store.COLUMNS:
        return
    record = dataclasses.make_dataclass("RunRecord", [("profile_json", "str", dataclasses.field(default="")),
                                                      ("profile_trace", "str", dataclasses.field(default=""))],
                                        bases=(store.RunRecord,))
    schema = pa.schema([*store.SCHEMA, pa.field("profile_json", pa.string()), pa.field("profile_trace", pa.string())])
    monkeypatch.setattr(store, "RunRecord", record)
    monkeypatch.setattr(store, "SCHEMA", schema)
    monkeypatch.setattr(store, "COLUMNS", tuple(schema.names))
    monkeypatch.setattr(store, "_EMPTY", [])


def _write(results, run_id, sweep, rung, change, summary, trace="", status="ok", stamp="2026-01-01T00:00:00Z"):
    record = store.RunRecord(run_id=run_id, status=status, timestamp=stamp, sweep_id=sweep, ladder="precision",
                             rung=rung, change=change, profile_json=summary.to_json() if summary else "",
                             profile_trace=trace)
    store.write_record(record, results)


def _command(capsys, *argv):
    code = profile_command.main("profile", list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_profile_command_prints_a_rung_the_diff_and_the_overview(profile_store, results, capsys):
    (results / "profiles").mkdir(parents=True)
    (results / "profiles" / "a.trace.json.gz").write_bytes(b"x")
    _write(results, "a", "s1", 0, "fp32", FP32, trace="profiles/a.trace.json.gz")
    _write(results, "b", "s1", 1, "bf16", BF16)
    _write(results, "c", "s1", 2, "channels_last", None)  # not profiled
    _write(results, "d", "s0", 0, "fp32", FP32, stamp="2025-01-01T00:00:00Z")
    code, out, _ = _command(capsys, "--results", str(results), "--sweep", "s1", "--rung", "0", "--rung", "1")
    assert code == 0 and out.splitlines()[0] == reading(diff_profiles(FP32, BF16, ("fp32", "bf16")))
    code, out, _ = _command(capsys, "--results", str(results), "--rung", "0")  # latest: s1
    assert code == 0 and out.startswith("sweep s1, rung 0 (fp32), run a: cpu, 2 profiled steps, 120 ms a step")
    assert f"trace: {results / 'profiles' / 'a.trace.json.gz'} " in out
    code, out, _ = _command(capsys, "--results", str(results), "--rung", "1", "--against", "s0:0")
    assert code == 0 and out.startswith("bf16: step 120 -> 80 ms; convolution backward 41 -> 18 ms")
    assert "s0:0 fp32" in out
    code, out, _ = _command(capsys, "--results", str(results), "--sweep", "s1")
    lines = out.splitlines()
    assert code == 0 and lines[0] == "sweep s1: 2 profiled rungs"
    assert lines[3].split()[:5] == ["0", "fp32", "120.0", "compute-bound", "aten::convolution_backward"]
    assert lines[4].split()[:4] == ["1", "bf16", "80.0", "data-bound"]
    assert f"python -m harness profile --results {results} --sweep s1 --rung 0 --rung 1" in out


def test_profile_command_errors_name_the_bad_value_and_the_choices(profile_store, results, capsys):
    _write(results, "a", "s1", 0, "fp32", FP32)
    _write(results, "b", "s1", 1, "bf16", BF16)
    _write(results, "c", "s1", 2, "channels_last", None)
    _write(results, "e", "s2", 0, "fp32", None)
    cases = {("--rung", "2"): "rung 2 of sweep s1 has no profile; rungs with a profile: 0, 1",
             ("--rung", "x"): "--rung 'x' is not a rung number",
             ("--rung", "0", "--against", "s1"): "--against 's1' is not SWEEP:RUNG",
             ("--rung", "0", "--rung", "1", "--against", "s1:0"): "give exactly one --rung",
             ("--rung", "0", "--rung", "1", "--rung", "2"): "--rung given 3 times",
             ("--sweep", "nope"): "unknown sweep 'nope'"}
    for argv, message in cases.items():
        code, out, err = _command(capsys, "--results", str(results), "--sweep", "s1", *argv)
        assert code == 2 and out == "" and message in err and err.count("\n") == 1, (argv, err)
    code, _, err = _command(capsys, "--results", str(results), "--sweep", "s2")
    assert code == 2 and "sweep s2 has no profiled rung" in err
    assert f"`python -m harness sweep +ladder=precision profile.enabled=true results_dir={results}`" in err


@pytest.mark.slow
def test_compiled_model_reports_graphs_and_no_recompile_while_profiling(tmp_path):
    parts = tiny_parts()
    parts.model = torch.compile(parts.model)
    step = marked_step(parts)
    for index in range(2):  # the warm-up compiles (forward and backward) before the profile
        step(index)
    summary = profile_steps(step, 2, CPU, tmp_path, first_step=2, compiled=True)
    assert summary.error == "" and summary.compile is not None
    assert summary.compile.unique_graphs >= 1 and summary.compile.frames_compiled >= 1
    assert summary.compile.recompiles_while_profiling == 0
    assert "torch.compile: " in render_profile(summary)


# ------------------------------------------------------------------------------------------
# wired into the measured path: settings, the child's order, the record, the cache, report and table


def test_profile_settings_are_checked_and_never_change_the_settings_hash():
    from harness import config as config_mod
    from tests.conftest import tiny_config

    base = tiny_config()
    assert base.profile.enabled is False and base.profile.steps == 5 and base.profile.trace_limit_mb == 16.0
    profiled = tiny_config(profile__enabled=True, profile__steps=2, profile__trace_limit_mb=4)
    assert config_mod.config_hash(profiled) == config_mod.config_hash(base)  # a cached run serves either
    for overrides, message in ((dict(profile__enabled=True, profile__steps=0), "profile.steps=0 must be at least 1"),
                               (dict(profile__enabled=True, profile__trace_limit_mb=0),
                                "profile.trace_limit_mb=0 must be a positive size"),
                               (dict(profile__steps=3), "profile.steps=3 sets up a profile that is never taken: add "
                                                        "profile.enabled=true")):
        with pytest.raises(ValueError, match=message):
            tiny_config(**overrides)


def test_the_window_holds_no_profiler_work_and_the_profile_follows_it(tmp_path, monkeypatch):
    """The profiler is created and started only after the window's closing marker, and is off at both markers
    and in every measured step."""
    from harness.run.child import measure
    from tests.conftest import tiny_config

    events = []
    real_steps, real_start = measure._steps, torch.profiler.profile.start

    def steps(loop, measured):
        events.append(("steps" if measured else "warm-up", torch.autograd._profiler_enabled()))
        out = real_steps(loop, measured)
        events.append(("steps end" if measured else "warm-up end", torch.autograd._profiler_enabled()))
        return out

    def start(self):
        events.append(("profiler start", torch.autograd._profiler_enabled()))
        return real_start(self)

    monkeypatch.setattr(measure, "_steps", steps)
    monkeypatch.setattr(torch.profiler.profile, "start", start)
    cfg = tiny_config(profile__enabled=True, profile__steps=2)
    progress = lambda phase, **info: events.append((phase, torch.autograd._profiler_enabled()))  # noqa: E731
    with measure.measured_run(cfg, cfg.workload, progress) as run:
        summary = run.profile(tmp_path)
    names = [name for name, _ in events]
    assert names == ["data", "warmup", "warm-up", "warm-up end", "measure", "steps", "steps end", "measured",
                     "profiler start"]
    assert not any(on for name, on in events if name != "profiler start")
    assert summary.error == "" and summary.steps == 2 and summary.trace.status == "written"
    assert len(run.m.step_ms) == 3  # the measurement is the measured steps alone
    assert run.loop.batches is None  # the loader let go when the block ended


def test_a_loader_only_run_records_why_it_has_no_profile(tmp_path):
    from harness.run.child import measure
    from tests.conftest import tiny_config

    cfg = tiny_config(profile__enabled=True, measure__mode="loader")
    with measure.measured_run(cfg, cfg.workload, lambda *a, **k: None) as run:
        summary = run.profile(tmp_path)
    assert summary.error == "not profiled: measure.mode=loader runs no training step"


def _cached_record(results, run_id, stamp, profile=None):
    record = store.RunRecord(run_id=run_id, status="ok", timestamp=stamp, sweep_id="s", config_hash="h", env_key="e",
                             config_json="{}", samples_per_s=10.0,
                             profile_json=profile.to_json() if profile is not None else "")
    store.write_record(record, results)


def test_a_sweep_that_profiles_takes_only_profiled_runs_from_the_cache(results):
    from harness.session.cache import lookup_cached

    _cached_record(results, "profiled", "2026-01-01T00:00:00Z", FP32)
    _cached_record(results, "failed", "2026-01-02T00:00:00Z", ProfileSummary("cpu", 2, 0.0, {}, error="failed"))
    _cached_record(results, "plain", "2026-01-03T00:00:00Z")
    assert lookup_cached(str(results), "h", "e", set()).run_id == "plain"  # the newest, profiled or not
    assert lookup_cached(str(results), "h", "e", set(), profiled=True).run_id == "profiled"
    assert lookup_cached(str(results), "h", "e", {"profiled"}, profiled=True) is None


def _profiled_sweep(results, profiles: dict, device="cpu"):
    from test_plots import record

    for rung, (change, summary) in enumerate(profiles.items()):
        trace = f"profiles/s-{rung}.trace.json.gz" if summary is not None else ""
        store.write_record(record("s", rung, 0, 50.0 + 10 * rung, change=change, device=device,
                                  profile_json=summary.to_json() if summary is not None else "",
                                  profile_trace=trace), results)


def test_the_table_says_what_bounds_each_profiled_rung(results):
    from harness.analysis.views import render
    from harness.analysis.views import table as table_mod

    _profiled_sweep(results, {"": FP32, "precision=bf16-mixed": BF16, "batch_size=8": None})
    table = table_mod.build_table(store.load_runs(results), "s")
    assert [r.bound for r in table.rows] == ["compute-bound", "data-bound", ""]
    text = render.to_markdown(table)
    assert "| 30% (compute-bound) |" in text and "| 30% (data-bound) |" in text and "| 30% |" in text
    assert "what the rung's profile says bounds a step" in text


def test_the_report_shows_each_profiled_rungs_breakdown_and_links_its_trace(results, tmp_path):
    from harness.analysis.views import report

    _profiled_sweep(results, {"": FP32, "precision=bf16-mixed": BF16, "batch_size=8": None})
    out = tmp_path / "pages" / "report.html"
    report.report_sweep(str(results), "s", out)
    page = out.read_text()
    assert page.count('class="profiles"') == 1
    assert "rung 0: (baseline)" in page and "rung 1: precision=bf16-mixed" in page
    assert "rung 2: batch_size=8" not in page  # not profiled
    assert 'href="../results/profiles/s-0.trace.json.gz"' in page  # from the page's folder to the trace
    assert "aten::convolution_backward" in page and "data-bound" in page
    assert "<script" not in page


def test_diagnosis_calls_a_step_that_idles_the_device_launch_bound():
    from harness.analysis.views.diagnosis import diagnose

    idle = {"forward": 10.0, "backward": 15.0, "optimizer": 5.0, "other": 0.0, "idle": 70.0}
    launch = synthetic(100.0, {"data_wait": 5.0, "forward": 40.0}, {"aten::add_": 1.0}, device_ms=idle)

    def rec(sps, **kw):
        return {"status": "ok", "samples_per_s": sps, "batch_size": 2, "data_wait_frac": 0.05, **kw}

    found = diagnose(rec(100.0), rec(10.0), rec(9.0, profile_json=launch.to_json()), "cuda", 4, False)
    assert found.verdict == "launch-bound" and found.text.startswith("launch-bound: the loader delivers")
    assert "The full step's profile: launch-bound (data wait 5% of the step, the device idle 70% of the span)" in (
        found.text)
    assert "compile=reduce-overhead" in found.advice[0]
    plain = diagnose(rec(100.0), rec(10.0), rec(9.0), "cuda", 4, False)  # no profile: the rates alone
    assert plain.verdict == "compute-bound" and plain.profile == ""


# ------------------------------------------------------------------------------------------
# end to end on the CPU


@pytest.mark.slow  # four rungs, each measured and profiled in its own process: minutes on 2 busy cores
def test_a_profiled_sweep_keeps_a_profile_and_trace_for_every_rung_and_diffs_two(results, tmp_path):
    from tests.conftest import ONE_ROUND, harness_cli

    out = harness_cli("sweep", "+ladder=phase2", "profile.enabled=true", "profile.steps=2", "measure.steps=3",
                      "measure.warmup_steps=1", *ONE_ROUND, f"results_dir={results}")
    assert out.returncode == 0, out.stdout + out.stderr
    frame = store.load_runs(results).sort_values("rung")
    assert list(frame["rung"]) == [0, 1, 2, 3] and set(frame["status"]) == {"ok"}
    for row in frame.itertuples():
        summary = summary_from_json(row.profile_json)
        assert summary.error == "" and summary.steps == 2 and summary.run_id == row.run_id
        assert row.profile_trace == f"profiles/{row.run_id}.trace.json.gz" == summary.trace.path
        trace = json.loads(gzip.decompress((results / row.profile_trace).read_bytes()))
        assert trace["traceEvents"] and set(MARKERS.values()) <= {e.get("name") for e in trace["traceEvents"]}
    assert not list(results.glob("profiles/.*"))  # no partial file left
    diff = harness_cli("profile", "--results", str(results), "--sweep", "latest", "--rung", "0", "--rung", "1")
    assert diff.returncode == 0, diff.stderr
    assert diff.stdout.startswith("precision=bf16-mixed: step ") and "bound: " in diff.stdout
    assert "operators whose self CPU time changed most" in diff.stdout
    page = harness_cli("report", "--results", str(results), "--out", str(results / "report.html"))
    assert page.returncode == 0, page.stderr
    html = (results / "report.html").read_text()
    assert html.count('href="profiles/') == 4 and "Profiles: where each rung" in html
    again = harness_cli("sweep", "+ladder=phase2", "profile.enabled=true", "profile.steps=2", "measure.steps=3",
                        "measure.warmup_steps=1", f"results_dir={results}")
    assert again.returncode == 0 and "(cached)" in again.stdout  # profiled runs serve a sweep that profiles


@pytest.mark.slow  # four runs in fresh processes
def test_a_profiled_run_measures_what_an_unprofiled_one_does(results):
    """The profile runs after the window: the same settings' samples/s with and without it agree within the
    noise model's band (runs interleaved, so that the machine's load falls on both alike)."""
    from harness.analysis.stats import noise_model
    from harness.run.parent import runner
    from harness.run.parent import env as env_mod
    from tests.conftest import tiny_config

    rates: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(2):
        for profiled in (False, True):
            profile = dict(profile__enabled=True, profile__steps=2) if profiled else {}
            cfg = tiny_config(results_dir=str(results), measure__steps=10, measure__warmup_steps=2, **profile)
            env, key = env_mod.environment(cfg.device)
            record = runner.run_and_store(cfg, env, key)
            assert record.status == "ok", record.error
            assert bool(record.profile_json) == profiled
            rates[profiled].append(record.samples_per_s)
    ratio = noise_model.ratio(noise_model.Runs(rates[True]), noise_model.Runs(rates[False]))
    assert ratio.low <= 1.0 <= ratio.high, (rates, ratio)
