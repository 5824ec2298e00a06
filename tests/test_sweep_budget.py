"""``sweep.budget_min`` bounds a sweep's wall time, on a faked clock with faked run durations (no real timing): a run
is not started once the budget is spent, a round that would not fit is not started, a first round the store says
cannot fit is not started at all. And bf16 on a CPU without bf16 units (a faked /proc/cpuinfo) is said before the
first bf16 run and under the table."""

from __future__ import annotations

import dataclasses
import io
import json
import socket

import pytest
from rich.console import Console

from harness import config as config_mod
from harness.analysis.views import cpu_bf16
from harness.analysis.views import table as table_mod
from harness.commands.sweep import RungLines
from harness.run.monitor import fitness
from harness.run.parent import env as env_mod
from harness.run.parent.runner import Machine
from harness.store import RunRecord, load_runs, store_record
from harness.sweeps import budget, loop, rounds
from harness.sweeps import rungs as rungs_mod
from tests.test_sweep_rounds import PHASE2, Display, FakeRuns, context, fake  # noqa: F401 (fake: a fixture)


class Clock:
    """The sweep's clock, moved on by the faked runs only."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TimedRuns(FakeRuns):
    """FakeRuns whose every run takes ``seconds`` of the faked clock."""

    def __init__(self, clock: Clock, seconds: float, **kwargs):
        super().__init__([10.0, 22.0, 31.0, 50.0], cv=0.25, seed=3, **kwargs)  # noisy: no early verdict
        self.clock, self.seconds = clock, seconds

    def __call__(self, ctx, rung, round_, machine, *args, **kwargs):
        self.clock.now += self.seconds
        return super().__call__(ctx, rung, round_, machine, *args, **kwargs)


@pytest.fixture
def clock(monkeypatch):
    faked = Clock()
    monkeypatch.setattr(rounds, "clock", faked)
    return faked


def test_a_two_minute_budget_ends_the_sweep_within_two_minutes_plus_one_run(tmp_path, fake, clock):  # noqa: F811 (fixture)
    runs = fake(TimedRuns(clock, seconds=50.0))
    display = Display()
    assert loop.run_ladder(context(tmp_path, "auto", budget_min=2), None, display) == 0
    assert clock.now <= 120.0 + 50.0 and runs.calls == [(0, 0), (1, 0), (2, 0)]  # the 4th would start at 150 s
    assert display.estimates[0].startswith("round 1: no estimate yet (a rung to measure has no stored run of its "
                                           "settings here); sweep.budget_min=2: the budget is checked before each run")
    assert display.lines[-1] == ("stop: sweep.budget_min=2 spent (2.5 min) before [rung 4/4, round 1 of up to 6]: "
                                 "what is measured is kept; give a larger sweep.budget_min, or measure.steps=N (fewer "
                                 "steps a run)")
    assert len(load_runs(tmp_path)) == 3  # no finished measurement lost


def test_a_round_that_would_not_fit_in_what_is_left_is_not_started(tmp_path, fake, clock):  # noqa: F811 (fixture)
    runs = fake(TimedRuns(clock, seconds=20.0))  # a round of 4 rungs: 80 s
    display = Display()
    loop.run_ladder(context(tmp_path, "auto", budget_min=5), None, display)
    assert len(runs.calls) == 12 and clock.now == 240.0  # a 4th round would end at 320 s, past 300
    assert display.estimates[1:] == ["round 2: ~1.3 min, estimated from the runs measured so far; 3.7 of "
                                     "sweep.budget_min=5 left",
                                     "round 3: ~1.3 min, estimated from the runs measured so far; 2.3 of "
                                     "sweep.budget_min=5 left"]
    assert display.lines[-1] == ("stop: time budget spent (another round would take ~1.3 min after 4.0 of "
                                 "sweep.budget_min=5; sweep.budget_min=6 would let it start)")


def test_repeats_n_keeps_its_rounds_unless_the_user_gives_a_budget(tmp_path, fake, clock):  # noqa: F811 (fixture)
    runs = fake(TimedRuns(clock, seconds=50.0))
    loop.run_ladder(context(tmp_path / "a", 2, budget_min=2), None, Display())
    assert len(runs.calls) == 8  # sweep.repeats=2 alone: both rounds
    given = dataclasses.replace(context(tmp_path / "b", 2, budget_min=2), user_keys=frozenset({"sweep.budget_min"}))
    runs.calls.clear()
    loop.run_ladder(given, None, Display())
    assert len(runs.calls) == 3


def test_a_first_round_the_store_says_cannot_fit_is_not_started(tmp_path, fake, clock):  # noqa: F811 (fixture)
    runs = fake(TimedRuns(clock, seconds=1.0))
    ctx, machine = context(tmp_path, "auto", budget_min=10), Machine(cuda_available=False)
    for r in PHASE2.rungs:  # an earlier sweep of the same settings here: 400 s a run
        cfg = rungs_mod.rung_config(ctx, r.index, machine)
        store_record(RunRecord(run_id=f"old-{r.index}", status="ok", timestamp="2026-11-20T10:00:00+0000",
                               config_hash=config_mod.config_hash(cfg), env_key="another", device="cpu",
                               hostname=socket.gethostname(), phase_wall_s=400.0, sweep_id="old"), str(tmp_path))
    display = Display()
    assert loop.run_ladder(ctx, machine, display) == 2
    assert runs.calls == []  # nothing measured
    assert display.estimates == ["round 1: ~26.7 min, estimated from 4 stored run(s) of these settings here; "
                                 "sweep.budget_min=10"]
    assert display.lines[-1] == ("stop: the first round would take ~26.7 min (from 4 stored run(s) of these settings "
                                 "here), more than sweep.budget_min=10: give sweep.budget_min=27 to measure it, or "
                                 "measure.steps=N (fewer steps a run); nothing was measured")
    assert budget.first_round_refusal((500.0, 4), 600.0) == ""  # it fits: it starts
    assert budget.first_round_line((0.0, 0), 600.0) == "round 1: nothing to measure (every rung is in the store)"


NO_BF16 = "processor\t: 0\nmodel name\t: AMD EPYC 7B12\nflags\t\t: fpu sse avx2 avx512f\n"


@pytest.fixture
def no_bf16(tmp_path, monkeypatch):
    """This CPU has avx512_bf16: a CPU without bf16 units, faked."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(NO_BF16)
    monkeypatch.setattr(fitness, "CPUINFO", cpuinfo)


def test_the_cpus_bf16_units_are_read_from_its_flags_and_recorded(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    monkeypatch.setattr(fitness, "CPUINFO", cpuinfo)
    for text, expected in ((NO_BF16, "none"), (NO_BF16.replace("avx512f", "avx512f avx512_bf16 amx_bf16"),
                                               "avx512_bf16 amx_bf16"),
                           ("Features\t: fp asimd bf16 i8mm\n", "bf16"), ("processor\t: 0\n", "")):
        cpuinfo.write_text(text)
        assert fitness.cpu_bf16() == expected
    cpuinfo.write_text(NO_BF16)
    assert env_mod.collect("cpu", git=False)["cpu_bf16"] == "none"
    assert RunRecord(run_id="r", status="ok", timestamp="t").cpu_bf16 == ""  # older records: unknown


def test_bf16_on_a_cpu_without_bf16_units_is_said_before_the_first_bf16_run_and_under_the_table(
        tmp_path, fake, no_bf16):  # noqa: F811 (fake: a fixture)
    ctx, machine = context(tmp_path, 1), Machine(cuda_available=False)

    class Runs(FakeRuns):  # calls before_launch as a measured run does, and records the CPU's bf16 units
        def __call__(self, ctx, rung, round_, machine_, on_start=None, on_progress=None, before_launch=None):
            cfg = rungs_mod.rung_config(ctx, rung, machine)
            before_launch(cfg)
            outcome = super().__call__(ctx, rung, round_, machine_)
            outcome.record.step_ms_p50 = 10.0  # what the outcome line shows
            store_record(RunRecord(**{**outcome.record.__dict__, "run_id": f"bf-{rung}", "cpu_bf16": "none",
                                      "config_json": json.dumps(config_mod.record_dict(cfg), default=str)}),
                         ctx.results_dir)
            return outcome

    fake(Runs([10.0, 2.0, 3.0, 4.0]))
    out = io.StringIO()
    lines = RungLines(Console(file=out, width=400, force_terminal=False))
    loop.run_ladder(ctx, None, lines)
    printed = out.getvalue().splitlines()
    note = f"note: {cpu_bf16.EMULATED}"
    assert printed.count(note) == 1 and printed.index(note) < next(i for i, p in enumerate(printed)
                                                                    if "[rung 2/4]" in p)
    assert not any("[rung 2/4]" in p for p in printed[:printed.index(note)])  # said before the first bf16 run
    frame = load_runs(tmp_path)
    table = table_mod.build_table(frame[frame["run_id"].str.startswith("bf-")], "s", str(tmp_path))
    assert ("bf16 was emulated on this CPU (cpu) (no AVX512-BF16 / AMX) in rungs [1, 2, 3]: they measure the "
            "emulation, much slower than fp32; the guides' claims are for GPUs") in table.notes
