"""Group claims: a guide's claim over several rungs together, parsed, stored with the records, judged in the table."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from harness.analysis.views import render
from harness.analysis.views import table as table_mod
from harness.store import COLUMNS, RunRecord, load_runs, write_record
from harness.config import ladder as ladder_mod

RUNGS = [{"set": {"batch_size": 4}}, {"set": {"data.num_workers": 2}}, {"set": {"data.prefetch_factor": 4}},
         {"set": {"data.persistent_workers": True}}]


def test_a_group_claim_is_parsed_with_its_span_and_source():
    groups = [{"rungs": [2, 4], "claim": [1.2, 1.4], "source": "s"}]
    lad = ladder_mod.parse("g", {"rungs": RUNGS, "group_claims": groups})
    (group,) = lad.group_claims
    assert (group.first, group.last, group.claim.low, group.claim.high) == (2, 4, 1.2, 1.4)
    assert group.claim.label() == "1.2-1.4x"
    stored = json.loads(ladder_mod.claim_fields(lad, 1)["group_claims_json"])
    assert stored == [{"first": 2, "last": 4, "low": 1.2, "high": 1.4, "label": "1.2-1.4x", "source": "s"}]


@pytest.mark.parametrize("span", [[0, 2], [3, 2], [2, 5], [2], "2-4", [2, 2]])
def test_a_group_over_a_bad_span_is_rejected_naming_it(span):
    with pytest.raises(ValueError, match=rf"group claim rungs={span!r}".replace("[", r"\[").replace("]", r"\]")
                       + r" is not valid: .*1 <= FIRST < LAST <= 4"):
        ladder_mod.parse("g", {"rungs": RUNGS, "group_claims": [{"rungs": span, "claim": [1.2, 1.4]}]})


def test_a_group_with_an_unknown_field_or_no_claim_is_rejected():
    unknown = r"unknown field of a group claim in ladder .g.: .claims.\. Did you mean .claim.\?"
    with pytest.raises(ValueError, match=unknown):
        ladder_mod.parse("g", {"rungs": RUNGS, "group_claims": [{"rungs": [1, 2], "claims": [2, 3]}]})
    with pytest.raises(ValueError, match=r"group claim over rungs \[1, 2\] has no claim"):
        ladder_mod.parse("g", {"rungs": RUNGS, "group_claims": [{"rungs": [1, 2]}]})


def _sweep(throughputs: list[float], groups: str, statuses=None) -> pd.DataFrame:
    rows = []
    for rung, sps in enumerate(throughputs):
        status = (statuses or {}).get(rung, "ok")
        rows.append(RunRecord(
            run_id=f"r{rung}", status=status, timestamp=f"2026-11-22T10:00:{rung:02d}", workload="resnet50",
            size="smoke", device="cpu", env_key="e", sweep_id="s", ladder="no-such-ladder", rung=rung,
            change=f"k{rung}=v" if rung else "", samples_per_step=4, samples_per_s=sps if status == "ok" else None,
            cpu_model="cpu", cpu_count=2, ladder_sha="0123456789abcdef", group_claims_json=groups))
    return pd.DataFrame([{c: getattr(r, c) for c in COLUMNS} for r in rows])


GROUPS = json.dumps([{"first": 2, "last": 4, "low": 1.2, "high": 1.4, "label": "1.2-1.4x", "source": "DETR #2"}])


def test_a_group_is_judged_as_its_last_rung_over_the_rung_before_it():
    table = table_mod.build_table(_sweep([10.0, 20.0, 22.0, 24.0, 26.0], GROUPS), "s")
    (group,) = table.groups
    assert group.measured.value == pytest.approx(26.0 / 20.0)
    # one run a rung and no calibration: the estimate, no band, no verdict
    assert group.verdict == table_mod.speedup.NO_BAND_TEXT
    assert group.changes == "k2=v, k3=v, k4=v" and group.note == ""
    text = render.to_markdown(table)
    assert ("Rungs 2-4 together (k2=v, k3=v, k4=v): measured 1.30x [no band: no variance known]" in text
            and "the guide claims 1.2-1.4x (DETR #2)" in text)
    assert "Rungs 2-4 together" in render.to_html(table)


def test_a_group_over_a_rung_that_failed_is_not_measured():
    table = table_mod.build_table(_sweep([10.0, 20.0, 22.0, 30.0, 0.0], GROUPS, statuses={4: "oom"}), "s")
    (group,) = table.groups
    assert group.measured is None and group.verdict == "not measured (rungs [4] did not run ok)"


def test_a_group_over_a_rung_skipped_on_this_device_is_judged_without_it_and_says_so():
    # a GPU-only knob inside the span (cudnn_benchmark on a CPU): every run of it skipped, the rungs after built
    # without it, so the group is its last rung over the rung before it, with a note
    table = table_mod.build_table(_sweep([10.0, 20.0, 22.0, 0.0, 26.0], GROUPS, statuses={3: "skipped"}), "s")
    (group,) = table.groups
    assert group.measured.value == pytest.approx(26.0 / 20.0)
    assert group.note == "rungs [3] skipped here (their knob cannot act on this device): judged without them"
    table = table_mod.build_table(_sweep([10.0, 20.0, 22.0, 0.0, 26.0], GROUPS, statuses={3: "error"}), "s")
    assert table.groups[0].verdict == "not measured (rungs [3] did not run ok)"  # a failure still stops it


def test_a_group_with_no_ok_rung_before_it_is_not_measured():
    table = table_mod.build_table(_sweep([10.0, 0.0, 22.0, 30.0, 33.0], GROUPS, statuses={0: "oom", 1: "oom"}), "s")
    (group,) = table.groups
    assert group.measured is None and group.verdict == "not measured (rungs [1] did not run ok)"
    assert "**not measured (rungs [1] did not run ok)**" in render.to_markdown(table)


def test_records_written_before_group_claims_read_back_without_any(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    record = RunRecord(run_id="old", status="ok", timestamp="2026-01-01T00:00:00", sweep_id="s", ladder="x", rung=0)
    frame = pd.DataFrame([{c: getattr(record, c) for c in COLUMNS if c != "group_claims_json"}])
    (tmp_path / "runs").mkdir()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp_path / "runs" / "old.parquet")
    new = RunRecord(run_id="new", status="ok", timestamp="2026-01-02T00:00:00", group_claims_json=GROUPS)
    write_record(new, tmp_path)
    got = load_runs(tmp_path).set_index("run_id")["group_claims_json"].fillna("")
    assert got["old"] == "" and got["new"] == GROUPS


@pytest.mark.parametrize("name,span,claim", [
    ("detr_guide", (2, 4), (1.2, 1.4)),
    ("detr_fast", (5, 7), (1.2, 1.4)),
    ("connectomics_progressive", (1, 3), (3, 4)),
    ("connectomics_progressive", (4, 5), (2, 2)),
    ("phase3", (1, 2), (2, 2)),
    ("a100_volume", (3, 4), (1.1, 1.2)),
    ("seresnet", (1, 2), (4, 8)),
])
def test_guide_group_claims_are_transcribed(name, span, claim):
    lad = ladder_mod.load(name)
    group = next(g for g in lad.group_claims if (g.first, g.last) == span)
    assert (group.claim.low, group.claim.high) == claim and group.claim.source


def test_the_report_lists_a_group_claim_with_its_verdict():
    from harness.analysis.views import report

    table = table_mod.build_table(_sweep([10.0, 20.0, 22.0, 24.0, 26.0], GROUPS), "s")
    html = report.verdicts_html(table)
    assert "<td class='num'>2-4</td><td><b>together</b> (k2=v, k3=v, k4=v)</td><td>1.2-1.4x</td><td>1.30x" in html
    assert "DETR #2" in html
