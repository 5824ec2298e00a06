"""``table`` and ``check`` in the CI dashboards' formats (Bencher's metric format, github-action-benchmark's custom
JSON, PyTorch's benchmark database), each with the band as its bounds, and ``check --format md`` as the
pull-request comment: the answer first, the counts, the configs worst first, "N more" within one comment."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from harness import cli
from harness.analysis.gate import paired
from harness.analysis.gate.thresholds import parse_thresholds
from harness.analysis.views import ci_formats, pr_comment
from harness.analysis.views import table as table_mod
from tests.test_export import SPEEDS, SWEEP, write_sweep


@pytest.fixture
def store(tmp_path):
    write_sweep(tmp_path)
    return tmp_path


def _table(store, fmt: str, capsys):
    capsys.readouterr()
    assert cli.main(["table", "--results", str(store), "--format", fmt]) == 0
    return json.loads(capsys.readouterr().out), table_mod.load_table(str(store), "latest")


def test_table_bmf_is_benchers_metric_format_with_the_band_as_bounds(store, capsys):
    doc, table = _table(store, "bmf", capsys)
    # Bencher's published schema (draft-07): an object of benchmarks, each an object of measures, each an object
    # with a number "value" and optional numbers "lower_value" and "upper_value"; names up to 1024 characters,
    # measure slugs up to 64
    assert isinstance(doc, dict) and len(doc) == len(SPEEDS)
    assert all(isinstance(m, dict) and len(name) <= 1024 for name, m in doc.items())
    for row in table.rows:
        measures = doc[f"unet3d phase2 rung {row.rung} {row.change}"]
        for slug, measure in measures.items():
            assert re.fullmatch(r"[a-z0-9-]{1,64}", slug)  # a Bencher measure slug
            assert set(measure) <= {"value", "lower_value", "upper_value"} and "value" in measure
            assert all(isinstance(v, float) for v in measure.values())
            assert measure["lower_value"] <= measure["value"] <= measure["upper_value"]
        assert measures["throughput"] == {"value": pytest.approx(row.samples_per_s),
                                          "lower_value": pytest.approx(row.samples_per_s * (1 - row.uncertainty)),
                                          "upper_value": pytest.approx(row.samples_per_s * (1 + row.uncertainty))}
        if row.rung == 0:  # the baseline rung: no speedup over itself
            assert row.x_baseline is None and "speedup" not in measures
            continue
        assert measures["speedup"] == {"value": pytest.approx(row.x_baseline.value),
                                       "lower_value": pytest.approx(row.x_baseline.low),
                                       "upper_value": pytest.approx(row.x_baseline.high)}


def test_table_gab_is_github_action_benchmarks_custom_format_bigger_is_better(store, capsys):
    items, table = _table(store, "gab", capsys)
    assert isinstance(items, list) and len(items) == 2 * len(SPEEDS) - 1  # rung 0 has no speedup
    for item in items:
        assert set(item) == {"name", "unit", "value", "range", "extra"}
        assert isinstance(item["name"], str) and isinstance(item["unit"], str) and isinstance(item["value"], float)
        assert re.fullmatch(r"± [0-9.e+-]+", item["range"])
        assert item["extra"].startswith("customBiggerIsBetter: higher is better; 95% band [")
    first = next(i for i in items if i["name"] == "unet3d phase2 rung 1 precision=bf16-mixed (throughput)")
    row = table.rows[1]
    assert first["unit"] == "samples/s" and first["value"] == pytest.approx(row.samples_per_s)
    assert float(first["range"][2:]) == pytest.approx(row.samples_per_s * row.uncertainty, rel=1e-5)


def test_table_pytorch_oss_is_the_benchmark_databases_records(store, capsys):
    records, table = _table(store, "pytorch-oss", capsys)
    assert isinstance(records, list) and len(records) == 2 * len(SPEEDS) - 1
    for record in records:
        assert set(record) == {"benchmark", "model", "metric"}
        assert isinstance(record["benchmark"]["name"], str) and isinstance(record["benchmark"]["extra_info"], dict)
        assert isinstance(record["model"]["name"], str)
        metric = record["metric"]
        assert set(metric) == {"name", "benchmark_values", "target_value", "extra_info"}
        assert all(isinstance(v, float) for v in metric["benchmark_values"])
    throughput = [r for r in records if r["metric"]["name"] == "throughput (samples/s)"]
    assert [r["metric"]["benchmark_values"] for r in throughput] == [SPEEDS[0], SPEEDS[1]]  # the runs themselves
    band = throughput[1]["metric"]["extra_info"]
    assert band["lower_value"] == pytest.approx(table.rows[1].samples_per_s * (1 - table.rows[1].uncertainty))
    assert band["higher_is_better"] is True and throughput[1]["benchmark"]["extra_info"]["sweep"] == SWEEP


def paired_result(ratios_by_rung: dict[int, list[float]]) -> paired.PairedResult:
    """A paired check's result from each config's per-round ratios (REF at 100 samples/s)."""
    rows = []
    for rung, ratios in ratios_by_rung.items():
        for rnd, ratio in enumerate(ratios):
            for side, sps in (("ref", 100.0), ("work", 100.0 * ratio)):
                rows.append({"against_side": side, "rung": rung, "round": rnd, "status": "ok", "samples_per_s": sps,
                             "workload": "unet3d", "ladder": "phase2", "change": f"knob{rung}=on",
                             "config_hash": f"cfg{rung:04d}abcdef", "error": "", "other_cpu_pct": 1.0})
    thresholds = parse_thresholds(None, 0.05, "--threshold")
    return paired.PairedResult(rows=paired.analyse(pd.DataFrame(rows), thresholds), check_id="against-1",
                               sweep_id=SWEEP, ref="main", ref_commit="def4567890" * 4,
                               work_commit="abc1234567" * 4, rounds=len(next(iter(ratios_by_rung.values()))),
                               thresholds=thresholds, commands=[["python", "-m", "harness", "check", "--against",
                                                                 "def4567890"]])


def test_a_checks_bmf_hands_over_the_band_the_gate_tested(capsys):
    result = paired_result({0: [0.80, 0.82, 0.79, 0.81], 1: [1.0, 1.01, 0.99, 1.0]})
    doc = json.loads(ci_formats.render(ci_formats.check_figures(result), "bmf"))
    for row in result.rows:
        assert doc[row.name]["head-over-base"] == {"value": pytest.approx(row.ratio),
                                                   "lower_value": pytest.approx(row.lower),
                                                   "upper_value": pytest.approx(row.upper)}
        assert doc[row.name]["throughput"] == {"value": pytest.approx(row.work_samples_per_s)}
    gab = json.loads(ci_formats.render(ci_formats.check_figures(result), "gab"))
    assert "verdict regressed" in gab[0]["extra"] and gab[0]["unit"] == "x (head/base throughput)"


def test_the_pr_comment_of_200_configs_fits_one_comment_worst_first_with_n_more():
    ratios = {k: [1.0, 1.003, 0.998, 1.001] for k in range(200)}  # unchanged
    ratios |= {7: [0.80, 0.82, 0.79, 0.81], 150: [0.70, 0.71, 0.69, 0.70]}  # two regressed, 150 the worst
    ratios |= {k: [0.93, 1.0, 0.90, 0.99] for k in (3, 99)}  # undecided
    result = paired_result(ratios)
    result.rows[42].status = "bimodal"  # a verdict this renderer does not know: shown right after regressed
    text = pr_comment.paired_comment(result)
    assert len(text) <= pr_comment.GITHUB_LIMIT
    lines = text.splitlines()
    assert lines[0] == ("### FAIL: decided slowdown: 2 regressed, 195 unchanged, 2 undecided, 0 busy, 1 bimodal · "
                        "head abc1234 vs base def4567, interleaved, 4 rounds (exit 1)")
    assert lines[2:5] == ["| regressed | bimodal | undecided | unchanged |", "|---|---|---|---|",
                          "| 2 | 1 | 2 | 195 |"]
    rows = [line for line in lines if line.startswith("| phase2 rung")]
    assert len(rows) == pr_comment.MAX_ROWS
    order = [int(re.match(r"\| phase2 rung (\d+)", r).group(1)) for r in rows]
    assert order[:5] == [150, 7, 42] + sorted([3, 99], key=lambda k: result.rows[k].ratio)
    assert all(" | unchanged |" in r for r in rows[5:])
    assert "... and 150 more config(s) (150 unchanged); `--format json` lists every one." in lines
    assert "| 100.00 | 70.00 | 0.700 [" in rows[0] and "regressed: throughput -30.0%" in rows[0]


def test_the_pr_comment_without_a_slowdown_says_so_first():
    text = pr_comment.paired_comment(paired_result({0: [1.0, 1.003, 0.998, 1.001], 1: [0.93, 1.0, 0.90, 0.99]}))
    assert text.splitlines()[0] == ("### UNDECIDED: no decided slowdown: 1 unchanged, 1 undecided, 0 busy · "
                                    "head abc1234 vs base def4567, interleaved, 4 rounds (exit 6)")
    assert "```sh\npython -m harness check --against def4567890\n```" in text and "more config(s)" not in text
