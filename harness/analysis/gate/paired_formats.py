"""A paired check's result (``check --against``) as text, JUnit XML or JSON, like the stored-baseline check's."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from dataclasses import asdict

from harness.analysis.gate import answers, summary
from harness.analysis.gate.rule import ALPHA
from harness.analysis.gate.paired import STATUSES, PairedResult, PairedRow

FORMATS = ("text", "junit", "json", "md")


def _num(value, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def band_text(row: PairedRow) -> str:
    """``[0.812, 0.873] @98.8%``: the one-sided bounds at the level Holm tested the config at."""
    if row.lower is None or row.upper is None:
        return "-"
    return f"[{row.lower:.3f}, {row.upper:.3f}] @{row.level:.1%}"


def header(result: PairedResult) -> list[str]:
    """What was measured against what, and how it was decided."""
    dirty = result.work_commit.endswith("-dirty")
    work = result.work_commit.removesuffix("-dirty")[:12] + (" + uncommitted changes, measured as they are"
                                                             if dirty else "")
    return [f"check --against {result.ref}: the working tree ({work}) against REF {result.ref_commit[:12]}, "
            f"configs of sweep {result.sweep_id}, {result.rounds} rounds in ABBA order (check {result.check_id})",
            f"threshold: throughput {result.thresholds.describe('-')}; regressed only when the band's upper end "
            f"(at the level shown, Holm's) lies below 1 - threshold, unchanged only when its lower end (each config "
            f"at {ALPHA:.0%}) lies above it; undecided otherwise",
            f"paired: one log ratio a round, the side order a term where clear, t on rounds - 1 (- 2) df; bands "
            f"one-sided at the level tested; family-wise error <= {ALPHA:.0%} over {result.family} configs "
            f"(Holm){_looks(result)}"]


def _looks(result: PairedResult) -> str:
    if not result.max_rounds or result.max_rounds == result.rounds and result.stopped in ("", "decided"):
        return ""
    why = f", stopped: {result.stopped}" if result.stopped else ""
    return (f" and over the looks of at most {result.max_rounds} rounds (O'Brien-Fleming spending); "
            f"{result.rounds} rounds measured{why}")


def format_text(result: PairedResult) -> str:
    """A plain table (CI logs stay readable), then a summary and the verdict."""
    table = [("status", "ladder", "rung", "change", "workload", "rounds", "REF /s", "work /s", "work/REF",
              "band (one-sided)", "notes")]
    for r in result.rows:
        table.append((r.status, r.ladder or "-", str(r.rung), r.change or "-", r.workload, str(r.rounds),
                      _num(r.ref_samples_per_s, ".2f"), _num(r.work_samples_per_s, ".2f"),
                      _num(r.ratio, ".3f") + ("x" if r.ratio is not None else ""), band_text(r),
                      "; ".join(r.notes) or "-"))
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]) - 1)]
    lines = header(result) + [""]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)) + "  " + line[-1] for line in table]
    counts = {s: sum(r.status == s for r in result.rows) for s in STATUSES}
    lines += ["", "summary: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)]
    lines.append(f"result: {verdict(result)} (exit {result.exit_code})")
    return "\n".join(line.rstrip() for line in lines)


def verdict(result: PairedResult) -> str:
    """The check's answer in words, led by its word for CI: OK, FAIL, BUSY, UNDECIDED or ERROR."""
    return answers.verdict(result.exit_code, {s: [r.name for r in result.rows if r.status == s]
                                              for s in ("regressed", "busy", "undecided", "bimodal")})


def format_md(result: PairedResult) -> str:
    """The summary for a pull request: the verdict first, the table, the commands that reproduce it."""
    rows = [[r.status, r.name, str(r.rounds), _num(r.ref_samples_per_s, ".2f"), _num(r.work_samples_per_s, ".2f"),
             _num(r.ratio, ".3f"), band_text(r), "; ".join(r.notes) or "-"] for r in result.rows]
    columns = ["status", "config", "rounds", "REF /s", "work /s", "work/REF", "band (one-sided)", "notes"]
    return summary.markdown(verdict(result), result.exit_code, header(result) + result.warnings, columns, rows,
                            result.commands, result.history or "results/history/index.html")


def format_junit(result: PairedResult) -> str:
    """One testcase per config: regressions are failures, busy configs errors, the rest without a verdict skipped."""
    rows = result.rows
    root = ET.Element("testsuites")
    node = ET.SubElement(root, "testsuite", name=f"harness.check --against {result.ref}", tests=str(len(rows)),
                         failures=str(sum(r.status == "regressed" for r in rows)),
                         errors=str(len(result.busy_rows)),
                         skipped=str(sum(r.status in ("undecided", "bimodal", "failed", "skipped") for r in rows)))
    for r in rows:
        case = ET.SubElement(node, "testcase", classname=f"harness.check.{r.ladder or r.workload}", name=r.name)
        detail = (f"status {r.status}; work/REF {_num(r.ratio, '.3f')} band {band_text(r)}; {r.rounds} rounds; "
                  + "; ".join(r.notes))
        if r.status == "regressed":
            ET.SubElement(case, "failure", message="; ".join(r.notes) or "regressed", type="regressed").text = detail
        elif r.status == "busy":
            ET.SubElement(case, "error", message="; ".join(r.busy), type="busy").text = detail
        elif r.status in ("undecided", "bimodal", "failed", "skipped"):
            ET.SubElement(case, "skipped", message=f"{r.status}: {'; '.join(r.notes)}")
        ET.SubElement(case, "system-out").text = detail
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


def to_json(result: PairedResult) -> dict:
    """The check as a JSON-ready dict (also what ``harness.analysis.gate.verdicts`` keeps for the history page)."""
    def clean(value):
        return None if isinstance(value, float) and math.isnan(value) else value

    rows = [{k: clean(v) for k, v in asdict(r).items()} | {"name": r.name} for r in result.rows]
    return {"kind": "against", "check_id": result.check_id, "sweep": result.sweep_id, "ref": result.ref,
            "ref_commit": result.ref_commit, "work_commit": result.work_commit, "rounds": result.rounds,
            "max_rounds": result.max_rounds, "stopped": result.stopped,
            "family_wise_error": ALPHA, "family": result.family, "exit_code": result.exit_code,
            "error": result.error(), "warnings": result.warnings,
            "counts": {s: sum(r.status == s for r in result.rows) for s in STATUSES}, "rows": rows}


def render(result: PairedResult, fmt: str = "text") -> str:
    """The whole output of ``check --against`` in ``fmt``, one of :data:`FORMATS`."""
    if fmt == "junit":
        return format_junit(result)
    if fmt == "json":
        return json.dumps(to_json(result), indent=2)
    if fmt == "md":
        return format_md(result)
    if fmt != "text":
        raise ValueError(f"unknown check format {fmt!r}; valid choices: {', '.join(FORMATS)}")
    return format_text(result)
