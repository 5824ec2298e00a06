"""A check as the pull-request comment teams expect (``check --format md``, ``--summary``, ``$GITHUB_STEP_SUMMARY``).

One line answers first (``### OK: no decided slowdown: 3 unchanged, 1 undecided, 0 busy · head abc1234 vs base
def5678, interleaved, 4 rounds (exit 0)``), then the count of every verdict, then one row a config, worst first
(``config | base | head | head/base [band] | verdict``), cut after :data:`MAX_ROWS` rows or when the comment would
pass :data:`BUDGET` characters, with how many more there are and their verdicts; then how the check decided,
the commands that reproduce it and the history page. Whatever verdict the gate gives is rendered: a status this
module does not know sorts right after *regressed*. The decisions are the gate's; nothing here changes one.
"""

from __future__ import annotations

import math
import shlex

from harness.analysis.gate import check_formats, paired_formats
from harness.analysis.gate.check import CheckResult
from harness.analysis.gate.paired import PairedResult
from harness.analysis.gate.summary import cell

GITHUB_LIMIT = 65_536  # the characters GitHub keeps of a comment's body
BUDGET = 60_000  # the table stops before the comment could pass GitHub's limit
MAX_ROWS = 50  # rows shown; the rest counted ("N more")
SEVERITY = ("regressed", "", "failed", "busy", "undecided", "warned", "missing", "not comparable", "new",
            "improved", "unchanged", "skipped")  # "": a status not listed here (a newer verdict of the gate)
SHOWN_COUNTS = ("unchanged", "undecided", "busy")  # always counted in the first line, 0 included


def _rank(status: str) -> int:
    return SEVERITY.index(status) if status in SEVERITY else SEVERITY.index("")


def _num(value, spec: str = ".2f") -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def headline(word: str, statuses: list[str], what: str, code: int) -> str:
    """``### WORD: [no ]decided slowdown: counts · what (exit code)``."""
    counts = {s: statuses.count(s) for s in dict.fromkeys(sorted(statuses, key=_rank))}
    regressed = counts.pop("regressed", 0)
    shown = ([f"{regressed} regressed"] if regressed else []) + [f"{counts.pop(s, 0)} {s}" for s in SHOWN_COUNTS]
    shown += [f"{n} {s}" for s, n in counts.items()]
    answer = "decided slowdown" if regressed else "no decided slowdown"
    return f"### {word}: {answer}: {', '.join(shown)} · {what} (exit {code})"


def count_table(statuses: list[str]) -> list[str]:
    """Every verdict the check gave and how many configs got it, worst first."""
    order = sorted(dict.fromkeys(statuses), key=_rank)
    return ["| " + " | ".join(order) + " |", "|" + "---|" * len(order),
            "| " + " | ".join(str(statuses.count(s)) for s in order) + " |"]


def comment(word: str, code: int, what: str, rows: list[tuple[str, list[str], float | None]], about: list[str],
            commands: list[list[str]], history: str) -> str:
    """The comment from ``rows`` (status, the cells of a row, its ratio for the order within a status)."""
    statuses = [status for status, _, _ in rows]
    lines = [headline(word, statuses, what, code), ""] + count_table(statuses) + [""]
    lines += ["| config | base /s | head /s | head/base [band] | verdict |", "|---|---|---|---|---|"]
    ordered = sorted(rows, key=lambda r: (_rank(r[0]), r[2] if r[2] is not None else math.inf))
    tail = _tail(about, commands, history)
    size = sum(len(line) + 1 for line in lines + tail)
    shown = 0
    for _, cells, _ in ordered:
        line = "| " + " | ".join(cell(c) for c in cells) + " |"
        if shown == MAX_ROWS or size + len(line) + 200 > BUDGET:
            break
        lines.append(line)
        size += len(line) + 1
        shown += 1
    if shown < len(ordered):
        rest = [status for status, _, _ in ordered[shown:]]
        kinds = ", ".join(f"{rest.count(s)} {s}" for s in dict.fromkeys(rest))
        lines += ["", f"... and {len(rest)} more config(s) ({kinds}); `--format json` lists every one."]
    return "\n".join(lines + tail) + "\n"


def _tail(about: list[str], commands: list[list[str]], history: str) -> list[str]:
    tail = ["", "<details><summary>How it was decided</summary>", ""] + [f"- {cell(a)}" for a in about]
    tail += ["", "</details>"]
    if commands:
        tail += ["", "Reproduce (from the repository's top folder, in a checkout of the measured commit):", "",
                 "```sh"] + [shlex.join(c) for c in commands] + ["```"]
    return tail + ["", f"History of every config: [{history}]({history})"]


def _verdict_cell(status: str, notes: list[str]) -> str:
    if status in ("unchanged", "improved") or not notes:
        return status
    return f"{status}: {notes[0][:160]}"


def paired_comment(result: PairedResult) -> str:
    """``check --against REF``'s comment: head (the working tree) against base (REF), interleaved."""
    word = paired_formats.verdict(result).split(":")[0]
    what = (f"head {result.work_commit[:7]}{' (dirty)' if result.work_commit.endswith('-dirty') else ''} vs base "
            f"{result.ref_commit[:7]}, interleaved, {result.rounds} rounds")
    rows = [(r.status, [r.name, _num(r.ref_samples_per_s), _num(r.work_samples_per_s),
                        f"{_num(r.ratio, '.3f')} {paired_formats.band_text(r)}" if r.ratio is not None else "-",
                        _verdict_cell(r.status, r.notes)], r.ratio) for r in result.rows]
    return comment(word, result.exit_code, what, rows, paired_formats.header(result) + result.warnings,
                   result.commands, result.history or "results/history/index.html")


def baseline_comment(result: CheckResult, commands: list[list[str]], history: str) -> str:
    """``check --baseline NAME``'s comment: head (the sweep) against base (the saved baseline)."""
    word = check_formats.verdict(result.rows).split(":")[0]
    what = f"head sweep {result.sweep_id} vs base {result.baseline_path.stem} (sweep {result.baseline_sweeps})"
    rows = []
    for r in result.rows:
        band = f" [{_num(r.ci_low, '.3f')}, {_num(r.ci_high, '.3f')}]" if r.ci_low is not None else ""
        ratio = f"{_num(r.ratio, '.3f')}{band}" if r.ratio is not None else "-"
        rows.append((r.status, [r.name, _num(r.baseline_samples_per_s), _num(r.current_samples_per_s), ratio,
                                _verdict_cell(r.status, r.software + r.notes)], r.ratio))
    return comment(word, result.exit_code, what, rows, check_formats.header_lines(result) + result.warnings,
                   commands, history)
