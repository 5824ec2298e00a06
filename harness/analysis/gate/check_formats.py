"""A check's result as text (for people and CI logs), JUnit XML (for CI test reports) or JSON (for scripts)."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from dataclasses import asdict

from harness.analysis.gate import answers, summary
from harness.analysis.gate.check import ALPHA, STATUSES, CheckResult, Comparison, exit_code

FORMATS = ("text", "junit", "json", "md")


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def format_text(rows: list[Comparison], header: list[str]) -> str:
    """A plain-text table (no colours or wrapping, so CI logs stay readable), then a summary."""
    table = [("status", "ladder", "rung", "change", "workload", "config", "throughput", "band (tested level)",
              "memory", "software / notes")]
    for r in rows:
        interval = f"[{_num(r.ci_low, '.3f')}, {_num(r.ci_high, '.3f')}]" if r.ci_low is not None else "-"
        table.append((r.status, r.ladder or "-", _num(r.rung, "d"), r.change or "-", r.workload,
                      r.config_hash[:10], _num(r.ratio, ".3f") + ("x" if r.ratio is not None else ""), interval,
                      _num(r.mem_ratio, ".3f") + ("x" if r.mem_ratio is not None else ""),
                      "; ".join(r.software + r.notes) or "-"))
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]) - 1)]
    lines = list(header) + [""]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)) + "  " + line[-1] for line in table]
    counts = {s: sum(r.status == s for r in rows) for s in STATUSES}
    lines += ["", "summary: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)]
    lines.append(f"result: {verdict(rows)} (exit {exit_code(rows)})")
    return "\n".join(line.rstrip() for line in lines)


def verdict(rows: list[Comparison]) -> str:
    """The check's answer in words, led by its word for CI: OK, FAIL, BUSY, UNDECIDED or ERROR."""
    return answers.verdict(exit_code(rows), {s: [r.name for r in rows if r.status == s]
                                             for s in ("regressed", "busy", "undecided", "warned")})


def format_junit(rows: list[Comparison], suite: str) -> str:
    """JUnit XML: one testcase per config; regressions are failures, missing/not comparable are skipped."""
    root = ET.Element("testsuites")
    node = ET.SubElement(root, "testsuite", name=suite, tests=str(len(rows)),
                         failures=str(sum(r.status == "regressed" for r in rows)),
                         errors=str(sum(r.status == "busy" for r in rows)),
                         skipped=str(sum(r.status in ("missing", "not comparable", "undecided") for r in rows)))
    for r in rows:
        case = ET.SubElement(node, "testcase", classname=f"harness.check.{r.ladder or r.workload}", name=r.name)
        detail = _detail(r)
        if r.status == "regressed":
            ET.SubElement(case, "failure", message="; ".join(r.notes) or "regressed", type="regressed").text = detail
        elif r.status == "busy":  # no verdict either way: an error of the measurement, not a failure of the code
            ET.SubElement(case, "error", message="; ".join(r.notes) or "busy", type="busy").text = detail
        elif r.status in ("missing", "not comparable", "undecided"):
            ET.SubElement(case, "skipped", message=f"{r.status}: {'; '.join(r.notes)}".rstrip(": "))
        ET.SubElement(case, "system-out").text = detail
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


def _detail(r: Comparison) -> str:
    return (f"status {r.status}; throughput ratio {_num(r.ratio, '.3f')} "
            f"[{_num(r.ci_low, '.3f')}, {_num(r.ci_high, '.3f')}]; memory ratio {_num(r.mem_ratio, '.3f')}; "
            f"hardware {r.hardware}; " + "; ".join(r.software + r.notes))


def format_json(rows: list[Comparison], info: dict) -> str:
    """A JSON document: run information, counts by status, the exit code and every row."""
    def clean(value):  # JSON has no NaN
        return None if isinstance(value, float) and math.isnan(value) else value

    items = [{k: clean(v) for k, v in asdict(r).items()} | {"name": r.name} for r in rows]
    counts = {s: sum(r.status == s for r in rows) for s in STATUSES}
    return json.dumps(info | {"exit_code": exit_code(rows), "counts": counts, "rows": items}, indent=2)


def format_md(result: CheckResult, commands: list[list[str]], history: str) -> str:
    """The summary for a pull request: the verdict first, the table, the commands that reproduce it."""
    rows = [[r.status, r.name, _num(r.ratio, ".3f"),
             f"[{_num(r.ci_low, '.3f')}, {_num(r.ci_high, '.3f')}]" if r.ci_low is not None else "-",
             _num(r.mem_ratio, ".3f"), "; ".join(r.software + r.notes) or "-"] for r in result.rows]
    header = ["status", "config", "throughput", "band (tested level)", "memory", "software / notes"]
    return summary.markdown(verdict(result.rows), exit_code(result.rows), header_lines(result) + result.warnings,
                            header, rows, commands, history)


def header_lines(result: CheckResult) -> list[str]:
    """What was checked against what, and how it was decided."""
    return [
        f"check: sweep {result.sweep_id} ({result.current_records} records) against baseline "
        f"{result.baseline_path.stem} (sweep {result.baseline_sweeps}, {result.baseline_records} records)",
        f"thresholds: throughput {result.thresholds.describe('-')}, peak memory "
        f"{result.mem_thresholds.describe('+')}; band: one-sided at the level Holm tests each config at (rung x "
        "round model, run-level t; with the session term across days); regressed only when its upper end lies "
        "below 1 - threshold, unchanged only when its lower end lies above it",
        f"{noise_text(result)}; family-wise error <= {ALPHA:.0%} over {result.family} configs (Holm)"] + (
        [result.sessions] if result.sessions else [])


def render_check(result: CheckResult, fmt: str = "text", commands: list[list[str]] | None = None,
                 history: str = "results/history/index.html") -> str:
    """The whole output of ``check`` in ``fmt``, one of :data:`FORMATS` (``commands`` and ``history``: for md)."""
    base = result.baseline_path.stem
    if fmt == "md":
        return format_md(result, commands or [], history)
    if fmt == "junit":
        return format_junit(result.rows, f"harness.check {result.sweep_id} vs {base}")
    if fmt == "json":
        return format_json(result.rows, {
            "baseline": str(result.baseline_path), "baseline_sweep": result.baseline_sweeps,
            "sweep": result.sweep_id, "noise": noise_text(result), "sessions": result.sessions,
            "family_wise_error": ALPHA, "family": result.family})
    if fmt != "text":
        raise ValueError(f"unknown check format {fmt!r}; valid choices: {', '.join(FORMATS)}")
    return format_text(result.rows, header_lines(result))


def noise_text(result: CheckResult) -> str:
    """The calibration the check pooled, or that it had none."""
    if result.noise.calibrated:
        return result.noise.describe()
    return f"noise: no calibration here ({result.calibrate}): the runs' own spread"
