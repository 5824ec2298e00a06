"""docs/guides.md is written by `python -m harness guides` from harness/conf/guides.yaml, the ladders and the
records under results/: a hand edit fails here, and a row is "full" only with the evidence its rule asks for."""

import re
from types import SimpleNamespace

import pytest

from harness.analysis.views import guides
from harness.commands.guides import main
from harness.config import ladder as ladder_mod
from tests.conftest import REPO


@pytest.fixture(scope="module")
def page():
    return guides.render_page(REPO)


def _rows(page, heading):
    """The recommendation rows of a guide's section (the tables under guides.ROW_HEAD)."""
    section = page.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0].splitlines()
    rows, inside = [], False
    for line in section:
        inside = line == guides.ROW_HEAD[0] or (inside and line.startswith("|"))
        rows += [line] if inside and line not in guides.ROW_HEAD else []
    return rows


def test_the_page_is_what_the_command_writes(page):
    assert (REPO / guides.PAGE).read_text() == page, "docs/guides.md differs: run `python -m harness guides`"


def test_a_hand_edit_of_the_page_fails_the_check(tmp_path, page):
    (tmp_path / "docs").mkdir()
    (tmp_path / "results").symlink_to(REPO / "results")
    (tmp_path / guides.PAGE).write_text(page.replace("| full;", "| full, by hand;", 1))
    assert main("guides", ["--check", "--root", str(tmp_path)]) == 1
    assert main("guides", ["--root", str(tmp_path)]) == 0
    assert (tmp_path / guides.PAGE).read_text() == page


def _current(ladder, device="cuda", sha=None, card="NVIDIA H100 80GB HBM3", when="2026-11-27T23:58:53+0000"):
    sha = sha or ladder_mod.file_sha(ladder)
    return {"ladder": ladder, "ladder_sha": sha, "device": device, "gpu_name": card,
            "git_commit": "778c5339b9fc", "timestamp": when, "sweep_id": f"s-{card}-{when}", "status": "ok",
            "rung": 0, "results": "results/nowhere"}


def _tables(records: guides.Records, rungs=(0, 1)) -> dict:
    """The tables the rows' evidence reads (their cache), one a sweep: ``rungs`` ran, each built on the one before."""
    row = [SimpleNamespace(rung=r, runs=2, built_on=(earlier := rungs[i - 1]) if i else None, verdict="",
                           absent=tuple(range(earlier + 1, r)) if i else ()) for i, r in enumerate(rungs)]
    table = SimpleNamespace(rows=row, groups=[], total_measured=None, total_verdict="")
    return {(r["results"], r["sweep_id"]): table for found in records.by_ladder.values() for r in found}


def test_every_card_that_measured_a_row_is_named_each_from_its_newest_sweep(tmp_path):
    row = {"id": "x", "recommendation": "r", "claim": "c", "measured_by": "m", "rungs": ["phase2:1"], "gpu": True}
    h200 = [_current("phase2", card="NVIDIA H200", when=w) for w in ("2026-11-29T23:40:00", "2026-11-28T10:00:00")]
    records = guides.Records(tmp_path, {"phase2": [_current("phase2"), *h200]})
    found = guides.grade(row, records, _tables(records))
    assert found.extent == "full" and found.evidence.kind == "gpu"
    assert found.text == ("full; measured on a GPU: NVIDIA H200, 778c533, 2026-11-29, `phase2` rung 1 "
                          "([records](../results/nowhere/README.md)); and on NVIDIA H100 80GB HBM3, 778c533, "
                          "2026-11-27, `phase2` rung 1 ([records](../results/nowhere/README.md))")


def test_a_row_only_a_gpu_judges_is_full_only_with_a_gpu_record_at_the_ladders_current_file(tmp_path):
    row = {"id": "x", "recommendation": "r", "claim": "c", "measured_by": "m", "rungs": ["phase2:1"], "gpu": True}
    none = guides.Records(tmp_path)
    assert guides.grade(row, none, {}).extent == "reproduced, needs a GPU"
    stale = guides.Records(tmp_path, {"phase2": [_current("phase2", sha="0" * 16)]})
    assert guides.grade(row, stale, {}).extent == "reproduced, needs a GPU"  # a ladder edited since its sweep
    on_cpu = guides.Records(tmp_path, {"phase2": [_current("phase2", device="cpu")]})
    found = guides.grade(row, on_cpu, _tables(on_cpu))
    assert (found.extent, found.evidence.kind) == ("reproduced, needs a GPU", "cpu")
    on_gpu = guides.Records(tmp_path, {"phase2": [_current("phase2")]})
    found = guides.grade(row, on_gpu, _tables(on_gpu))
    assert (found.extent, found.evidence.kind) == ("full", "gpu")
    # a GPU sweep of the ladder that did not measure the rung (a guide's total, by its two ends): no evidence of it
    assert guides.grade(row, on_gpu, _tables(on_gpu, rungs=(0, 3))).extent == "reproduced, needs a GPU"
    assert guides.grade(row, on_gpu, {}).extent == "reproduced, needs a GPU"  # nor a sweep whose table is unread
    assert found.text.startswith("full; measured on a GPU: NVIDIA H100 80GB HBM3, 778c533, 2026-11-27, `phase2` rung 1")
    # a guide's premise that only a GPU checks holds every row of it back, until the premise's ladder has a record
    premise = {"ladder": "a100_volume", "why": "its loop waiting 83-94% on data"}
    plain = {**row, "gpu": False, "rungs": ["a100_volume:1"]}
    assert guides.grade(plain, none, {}, premise).extent == "reproduced, needs a GPU"
    a100 = guides.Records(tmp_path, {"a100_volume": [_current("a100_volume")]})
    assert guides.grade(plain, a100, _tables(a100), premise).extent == "full"
    assert guides.grade({**row, "differs": "a stand-in"}, on_gpu, _tables(on_gpu)).extent == "partly"


def test_a_pointer_past_the_ladders_rungs_names_the_row():
    lad = ladder_mod.load("resnet50_matmul")
    last = len(lad.rungs) - 1  # rung 0 is the baseline
    row = {"id": "6", "rungs": [f"resnet50_matmul:{last + 1}"]}
    with pytest.raises(ValueError, match=f"guides row 6: ladder resnet50_matmul has rungs 0-{last}, not {last + 1}"):
        guides.grade(row, guides.Records(REPO), {})


def test_the_totals_are_counted_from_the_rows(page):
    headings = [s["heading"] for s in guides.load_data()["sections"] if any("rows" in b for b in s["blocks"])]
    every = [cell for h in headings for cell in (line.rsplit(" | ", 1)[1] for line in _rows(page, h))]
    totals = re.search(r"\| \*\*all\*\* \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|", page)
    counts = [sum(c.startswith(k) for c in every) for k in ("full", "partly", "reproduced, needs a GPU", "none")]
    assert [int(x) for x in totals.groups()] == [len(every), *counts]


def test_the_issues_cases_read_as_the_ladders_and_records_show(page):
    a100 = _rows(page, "The A100 volume-model guide")
    full = [line for line in a100 if line.endswith(("| full |",)) or "| full;" in line]
    # only Option A's total, measured by its two ends on the H200 (2026-11-30); its rungs alone were not measured
    assert len(full) == 1 and full[0].startswith("| Option A |") and "`a100_option_a` total: confirms" in full[0]
    quick = _rows(page, "The connectomics guide")
    assert not any(f"`{name}` rung" in line.rsplit(" | ", 1)[1] for line in a100 + quick
                   for name in ("a100_option_a", "connectomics_quick"))
    assert any("`connectomics_quick` total: falls short" in line for line in quick)
    (detr,) = [r for r in _rows(page, "The DETR guide") if "Data Loading Optimization" in r]
    assert "partly: judged at its epoch as derived, not as measured" in detr  # as the ladder's own note says
    assert "cannot be judged" not in (REPO / "harness/conf/ladder/detr_guide.yaml").read_text()
    imagenet = _rows(page, "The ImageNet ResNet-50 guide")
    assert all("| partly:" in r for r in imagenet if r.startswith(("| Total", "| 6 ")) or "num_workers: 48" in r)
    seresnet = _rows(page, "The SEResNet speech guide")
    assert all("| reproduced, needs a GPU (the 2D model at the full size" in r
               for r in seresnet if r.startswith("| 1 "))
    (cap,) = [r for r in _rows(page, "The connectomics guide") if "as the guide's framework runs it" in r]
    assert "`connectomics_workers_cap` rung 1 (1 -> 2 workers" in cap
    assert "1.21x" not in page and "sweep phase2-20261127-235759992403-d8545708 of 2026-11-27" in page
    assert "the loop was limited by both: the loader and the device" in page
