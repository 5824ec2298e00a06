"""The guides' map, docs/guides.md, written from one data file (``harness/conf/guides.yaml``: each guide's
recommendations, quoted, with the claim, what measures it and how its situation differs here), the ladders it
points at (each pointer checked against the ladder's file) and the records under ``results/``: a row's grade is
computed, never typed. Plain Python, no torch; ``python -m harness guides`` writes the page, ``--check`` compares.

A row's evidence is the best of: *measured on a GPU* (ok CUDA records of one of its ladders at the ladder's
current file: for each card that measured it, newest card first, its newest sweep's commit, date, the rung's verdict
and a link to the records), *measured on a CPU* (the same on a
CPU), *designed* (a rung, or a ladder, measures it at the CPU size; or a command does, with no rung). Its extent:
**none** (not measurable here, why; or needs several GPUs), **partly** (how the stand-in differs), or **full**:
the situation reproduced and, where only a GPU can judge it (``gpu``, or the guide's premise), a GPU record at the
ladder's current file. A row that needs a GPU and has none reads "reproduced, needs a GPU", never "full".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import yaml

from harness.analysis.views.table import load_table
from harness.conf import CONF_DIR
from harness.config import ladder as ladder_mod

DATA_FILE = CONF_DIR / "guides.yaml"
PAGE = Path("docs") / "guides.md"
COLUMNS = ("ladder", "ladder_sha", "device", "gpu_name", "git_commit", "timestamp", "sweep_id", "status", "rung")
ROW_HEAD = ("| # | recommendation (quoted) | claim | measured by | here (this machine) |", "|---|---|---|---|---|")


@dataclass(frozen=True)
class Pointer:
    """``ladder``, ``ladder:N`` (a rung), ``ladder:A-B`` (a group) or ``ladder:total``."""

    ladder: str
    rungs: tuple[int, ...] = ()  # () for the whole ladder or its total
    total: bool = False

    @classmethod
    def parse(cls, text: str) -> "Pointer":
        name, _, where = str(text).partition(":")
        if not where:
            return cls(name)
        if where == "total":
            return cls(name, total=True)
        low, _, high = where.partition("-")
        return cls(name, (int(low), int(high)) if high else (int(low),))

    def words(self) -> str:
        if self.total:
            return f"`{self.ladder}` total"
        if not self.rungs:
            return f"`{self.ladder}`"
        return f"`{self.ladder}` rung {self.rungs[0]}" if len(self.rungs) == 1 else \
            f"`{self.ladder}` group rungs {self.rungs[0]}-{self.rungs[1]}"


@dataclass(frozen=True)
class Evidence:
    kind: str  # "gpu", "cpu", "designed", "command"
    text: str


@dataclass
class Grade:
    extent: str  # "full", "partly", "reproduced, needs a GPU", "none"
    text: str  # the row's last cell
    evidence: Evidence
    needs_gpu: bool


@dataclass
class Records:
    """The ok records under results/, by ladder: only the columns a grade needs (read with pyarrow, fast)."""

    root: Path
    by_ladder: dict[str, list[dict]] = field(default_factory=dict)

    @classmethod
    def scan(cls, root: Path) -> "Records":
        found = cls(root)
        for path in sorted((root / "results").glob("*/runs/*.parquet")):
            try:
                names = set(pq.read_schema(path).names)
                rows = pq.read_table(path, columns=[c for c in COLUMNS if c in names]).to_pylist()
            except (OSError, ValueError):
                continue
            for row in rows:
                if row.get("status") == "ok" and row.get("ladder") and row.get("ladder_sha"):
                    row["results"] = path.parent.parent.relative_to(root).as_posix()
                    found.by_ladder.setdefault(row["ladder"], []).append(row)
        return found

    def current(self, ladder: str, device: str) -> list[dict]:
        """The ok records of ``ladder`` on ``device`` taken at its current file, newest first."""
        sha = ladder_mod.file_sha(ladder, str(self.root / "results"))  # the shipped file first
        rows = [r for r in self.by_ladder.get(ladder, []) if r["ladder_sha"] == sha and r["device"] == device]
        for row in rows:  # the day a sweep started, its first record's
            row["sweep_started"] = min(str(r["timestamp"]) for r in rows if r["sweep_id"] == row["sweep_id"])
        return sorted(rows, key=lambda r: str(r["timestamp"]), reverse=True)


def load_data(path: Path = DATA_FILE) -> dict:
    return yaml.safe_load(path.read_text())


def check_pointer(pointer: Pointer, row_id: str) -> None:
    """ValueError, naming the row, when the pointer's ladder, rung or total is not in the ladder's file."""
    if not (ladder_mod.LADDER_DIR / f"{pointer.ladder}.yaml").is_file():
        raise ValueError(f"guides row {row_id}: no ladder {pointer.ladder!r} (harness/conf/ladder/)")
    lad = ladder_mod.load(pointer.ladder)
    if pointer.total and lad.total_claim is None:
        raise ValueError(f"guides row {row_id}: ladder {pointer.ladder} has no total_claim")
    for rung in pointer.rungs:
        if not 0 <= rung < len(lad.rungs):  # lad.rungs holds the baseline, rung 0
            raise ValueError(f"guides row {row_id}: ladder {pointer.ladder} has rungs 0-{len(lad.rungs) - 1}, "
                             f"not {rung}")


def _table(record: dict, root: Path, cache: dict):
    """The table of the record's sweep (None where it cannot be read), read once."""
    key = (record["results"], record["sweep_id"])
    if key not in cache:
        try:
            cache[key] = load_table(str(root / record["results"]), record["sweep_id"])
        except (ValueError, KeyError, OSError):
            cache[key] = None
    return cache[key]


def measures(pointer: Pointer, record: dict, root: Path, cache: dict) -> bool:
    """Whether the record's sweep measured what the pointer names: its total or group judged (a figure, or
    "not measured" never), its rung run ok and built on the rungs before it (a guide's total measured by its two
    ends holds the rungs between in its last rung: no rung of it alone is measured there); the whole ladder by
    any sweep of it."""
    if not (pointer.total or pointer.rungs):
        return True
    table = _table(record, root, cache)
    if table is None:
        return False
    if pointer.total:
        return table.total_measured is not None
    if len(pointer.rungs) == 2:
        return any((g.first, g.last) == pointer.rungs and g.measured is not None for g in table.groups)
    row = next((r for r in table.rows if r.rung == pointer.rungs[0] and r.runs), None)
    if row is None or row.rung == 0:
        return row is not None
    return row.built_on is not None and not row.absent


def _verdict(record: dict, pointer: Pointer, root: Path, cache: dict) -> str:
    """The verdict the records' table gives the pointer's rung or total ("" where it gives none)."""
    table = _table(record, root, cache)
    if table is None:
        return ""
    if pointer.total:
        return table.total_verdict
    if len(pointer.rungs) == 2:
        return next((g.verdict for g in table.groups if (g.first, g.last) == pointer.rungs), "")
    rows = [r for r in table.rows if pointer.rungs and r.rung == pointer.rungs[0]]
    return rows[0].verdict if rows else ""


def _measured(pointer: Pointer, record: dict, root: Path, cache: dict) -> str:
    date = str(record["sweep_started"])[:10]
    verdict = _verdict(record, pointer, root, cache)
    link = f"[records](../{record['results']}/README.md)"
    said = f"{pointer.words()}: {verdict}" if verdict else f"{pointer.words()}"
    return f"{str(record.get('git_commit') or '?')[:7]}, {date}, {said} ({link})"


def _newest_per_card(found: list[dict]) -> list[dict]:
    """The newest record of each card (``found`` newest first), the newest card first."""
    cards: dict[str, dict] = {}
    for record in found:
        cards.setdefault(record.get("gpu_name") or "cuda", record)
    return list(cards.values())


def _measuring(pointer: Pointer, records: Records, device: str, cache: dict) -> list[dict]:
    """The records, newest first, of the sweeps of the pointer's ladder on ``device`` that measured it."""
    return [r for r in records.current(pointer.ladder, device) if measures(pointer, r, records.root, cache)]


def evidence(pointers: list[Pointer], records: Records, cache: dict) -> Evidence:
    for pointer in pointers:  # every card that measured it, each from its newest sweep that did
        cards = _newest_per_card(_measuring(pointer, records, "cuda", cache))
        if cards:
            said = [f"{r.get('gpu_name') or 'cuda'}, {_measured(pointer, r, records.root, cache)}" for r in cards]
            return Evidence("gpu", "measured on a GPU: " + "; and on ".join(said))
    for pointer in pointers:
        found = _measuring(pointer, records, "cpu", cache)
        if found:
            return Evidence("cpu", f"measured on a CPU, {_measured(pointer, found[0], records.root, cache)}")
    if any(p.rungs or p.total for p in pointers):
        return Evidence("designed", "designed: a rung measures it at the CPU size")
    if pointers:
        return Evidence("designed", "designed: " + ", ".join(p.words() for p in pointers) + " at the CPU size")
    return Evidence("command", "designed: a command, no rung")


def grade(row: dict, records: Records, cache: dict, premise: dict | None = None) -> Grade:
    """The row's grade (see the module docstring); every pointer checked against its ladder's file."""
    pointers = [Pointer.parse(p) for p in row.get("rungs", [])]
    for pointer in pointers:
        check_pointer(pointer, row["id"])
    if row.get("needs") == "several GPUs":
        return Grade("none", "none: needs several GPUs", Evidence("none", ""), True)
    if row.get("not_measurable"):
        return Grade("none", f"none: not measurable here: {row['not_measurable']}", Evidence("none", ""), False)
    found = evidence(pointers, records, cache)
    gpu = row.get("gpu")
    why = [gpu] if isinstance(gpu, str) else []
    premise_open = bool(premise and pointers) and not records.current(premise["ladder"], "cuda")
    why += [f"the guide's premise: {premise['why']}"] if premise_open else []
    needs = "needs a GPU" + (f" ({'; '.join(why)})" if why else "") if gpu or premise_open else ""
    gpu_measured = found.kind == "gpu"
    if row.get("differs"):
        parts = [f"partly: {row['differs']}", *([needs] if needs and not gpu_measured else []), found.text]
        return Grade("partly", "; ".join(parts), found, bool(needs))
    if needs and not gpu_measured:
        return Grade("reproduced, needs a GPU", f"reproduced, {needs}; {found.text}", found, True)
    note = [row["note"]] if row.get("note") else []
    return Grade("full", "; ".join(["full", *note, found.text]), found, bool(needs))


def _cell(text: Any) -> str:
    return str(text).replace("\n", " ").strip()


def rows_table(rows: list[dict], records: Records, cache: dict, premise: dict | None) -> tuple[list[str], list]:
    lines, grades = list(ROW_HEAD), []
    for row in rows:
        g = grade(row, records, cache, premise)
        grades.append(g)
        cells = (row["id"], row["recommendation"], row["claim"], row["measured_by"], g.text)
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return lines, grades


TOTALS_HEAD = ("| guide | rows | full | partly | reproduced, needs a GPU | none | measured on a GPU | "
               "measured on a CPU |", "|---|---|---|---|---|---|---|---|")


def totals_table(counted: dict[str, list[Grade]]) -> list[str]:
    """One line per guide and one for all, each counted from the rows' grades."""
    lines = list(TOTALS_HEAD)
    every = [g for grades in counted.values() for g in grades]
    for name, grades in [*counted.items(), ("all", every)]:
        count = [len(grades), *(sum(g.extent == e for g in grades)
                                for e in ("full", "partly", "reproduced, needs a GPU", "none")),
                 sum(g.evidence.kind == "gpu" for g in grades), sum(g.evidence.kind == "cpu" for g in grades)]
        label = f"**{name}**" if name == "all" else name
        lines.append(f"| {label} | " + " | ".join(map(str, count)) + " |")
    return lines


def worked_example(spec: dict, root: Path) -> str:
    """The reading line of ``spec['change']`` in the newest sweep of ``spec['ladder']`` under ``spec['results']``
    at its current file, with where it came from."""
    records = Records.scan(root)
    found = [r for r in records.current(spec["ladder"], "cuda") if r["results"] == spec["results"]]
    if not found:
        return f"(no current record of `{spec['ladder']}` under {spec['results']})"
    newest = found[0]
    table = load_table(str(root / newest["results"]), newest["sweep_id"])
    line = next((x for x in table.readings if x.startswith(spec["change"] + ":")), "")
    runs = sum(1 for r in found if r["sweep_id"] == newest["sweep_id"])
    return (f"on the {newest.get('gpu_name') or 'GPU'} (`{spec['results']}`, {spec['ladder']}, sweep "
            f"{newest['sweep_id']} of {newest['sweep_started'][:10]}, {runs} runs): \"{line}\"")


def render_page(root: Path, data: dict | None = None) -> str:
    """The whole page, from the data file, the ladders and the records under ``root``/results."""
    data = data if data is not None else load_data()
    records, cache, counted = Records.scan(root), {}, {}
    sections = []
    for section in data["sections"]:
        out = [f"## {section['heading']}", ""] if section.get("heading") else []
        for block in section["blocks"]:
            if "rows" in block:
                lines, grades = rows_table(block["rows"], records, cache, section.get("premise"))
                counted.setdefault(section["heading"], []).extend(grades)
                out += lines + [""]
            elif block.get("totals"):
                out += ["{{totals}}", ""]
            else:
                out += [block["text"].rstrip("\n"), ""]
        sections.append("\n".join(out))
    page = "\n".join(sections)
    page = page.replace("{{totals}}", "\n".join(totals_table(counted)))
    if "{{worked_example}}" in page:
        page = page.replace("{{worked_example}}", worked_example(data["worked_example"], root))
    return page.rstrip("\n") + "\n"


def differs(root: Path) -> bool:
    """Whether the page under ``root`` differs from what :func:`render_page` writes."""
    path = root / PAGE
    return not path.is_file() or path.read_text() != render_page(root)
