"""The paired check of ``check --against REF``: REF's code and the working tree's, measured in the same session.

Each round measures every config once with each side, back to back (ABBA / serpentine order: see
``harness.sweeps.against``), so the two runs of a round share the machine's state of that moment: what
the machine does between days, or for a few minutes, moves both sides alike and cancels in their ratio.
The unit is therefore the round: one log ratio work/REF per round, their mean and standard error, Student's
t on rounds - 1 degrees of freedom. ``harness.analysis.gate.rule`` turns those into the verdict (one-sided
against the threshold, Holm over the configs, the band shown at the level tested).

A config with a busy run on either side (``harness.analysis.stats.busy``) gets no verdict: the check exits 2 and
names it. A config the working tree now fails on (where REF ran ok) regressed, whatever its speed.
No torch, no Hydra.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from harness.analysis.gate import rule
from harness.analysis.gate import answers, looks
from harness.analysis.stats import bimodal
from harness.analysis.stats.busy import busy_reason
from harness.analysis.gate.thresholds import Thresholds

REF, WORK = "ref", "work"
SIDES = (REF, WORK)
STATUSES = ("regressed", "undecided", "bimodal", "improved", "unchanged", "busy", "failed", "skipped")
COMPARED = ("regressed", "undecided", "improved", "unchanged")
DECIDED = ("regressed", "improved", "unchanged")
BIMODAL_ALPHA = 0.02  # a check names bimodal runs falsely in at most this share of checks (normal runs), all looks
ORDER_NOTE = 0.01  # a side-order effect this large (log) and clear is named in the row's notes


@dataclass
class PairedRow:
    """One config of a paired check."""

    status: str
    rung: int
    workload: str = ""
    ladder: str = ""
    change: str = ""
    config_hash: str = ""  # the working tree's
    rounds: int = 0  # rounds with an ok run on both sides
    ratio: float | None = None  # throughput work / REF (geometric mean of the rounds' ratios); > 1 is faster
    lower: float | None = None  # one-sided bounds at `level`
    upper: float | None = None
    level: float | None = None  # the confidence Holm tested this config at
    p_value: float | None = None  # one-sided: slower by more than the threshold
    threshold: float = 0.0
    ref_samples_per_s: float | None = None
    work_samples_per_s: float | None = None
    busy: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        where = f"{self.ladder} rung {self.rung}" if self.ladder else f"config {self.rung}"
        change = f" {self.change}" if self.change else ""
        return f"{where}{change} [{self.workload} {self.config_hash[:10]}]"


@dataclass
class PairedResult:
    """A paired check: its rows and what the output says about how it was made."""

    rows: list[PairedRow]
    check_id: str
    sweep_id: str
    ref: str  # as the user gave it
    ref_commit: str
    work_commit: str  # "-dirty" appended when the working tree had uncommitted changes
    rounds: int  # rounds measured
    thresholds: Thresholds
    warnings: list[str] = field(default_factory=list)
    max_rounds: int = 0  # the round budget its looks spent the error over (0: as many as measured)
    stopped: str = ""  # why it measured no more rounds ("decided", "budget: ...")
    commands: list[list[str]] = field(default_factory=list)  # the command lines that reproduce it (argv lists)
    history: str = ""  # where the history page is (a URL or a path)

    @property
    def family(self) -> int:
        return sum(r.level is not None for r in self.rows)

    @property
    def busy_rows(self) -> list[PairedRow]:
        return [r for r in self.rows if r.status == "busy"]

    @property
    def undecided_rows(self) -> list[PairedRow]:
        return [r for r in self.rows if r.status in ("undecided", "bimodal")]

    @property
    def exit_code(self) -> int:
        """``answers.exit_code``: 1 regressed, 5 busy, 2 nothing comparable, 6 undecided, 0 decided."""
        return answers.exit_code(["undecided" if r.status == "bimodal" else r.status for r in self.rows])

    def error(self) -> str:
        """Why the check cannot say (exit 5, 6 or 2), or ""."""
        code = self.exit_code
        if code == answers.BUSY:
            named = "; ".join(f"{r.name}: {r.busy[0]}" for r in self.busy_rows)
            return (f"the machine was busy during {len(self.busy_rows)} config(s), so the check cannot say: "
                    f"{named}. Stop the other work and run the same command again")
        if code == answers.UNDECIDED:
            named = "; ".join(r.name for r in self.undecided_rows)
            why = f" ({self.stopped})" if self.stopped else ""
            if any(r.status == "bimodal" for r in self.undecided_rows):
                return (f"{len(self.undecided_rows)} config(s) without a verdict after {self.rounds} rounds{why}: "
                        f"{named}. The bimodal ones' runs land at two speeds: {bimodal.ADVICE}")
            return (f"{len(self.undecided_rows)} config(s) undecided after {self.rounds} rounds{why}: {named}. "
                    "A larger --budget-min or --max-rounds decides them")
        if code == answers.NOTHING_COMPARABLE:
            return f"nothing comparable: no config ran ok on both sides in 2 or more rounds (sweep {self.sweep_id})"
        return ""


def analyse(records: pd.DataFrame, thresholds: Thresholds, at_level: Callable[[float], float] | None = None,
            same_at: Callable[[float], float] | None = None, n_looks: int = 1) -> list[PairedRow]:
    """Every config of one paired check's records (columns of the store, ``against_side`` set), decided together;
    ``at_level`` and ``same_at``: the levels this look of a check that adds rounds tests at (``looks``); ``n_looks``:
    how many looks it makes at most, the bimodal test's error spent over them (``at_look`` gives all three)."""
    rows, effects = [], []
    # Bonferroni over every config's two sides and every look: each look tests the runs anew
    level = BIMODAL_ALPHA / max(2 * records["rung"].nunique() * n_looks, 1)
    for rung, group in records.groupby("rung", sort=True):
        row, effect = _config(int(rung), group, thresholds, level)
        rows.append(row)
        effects.append(effect)
    family = [i for i, (r, e) in enumerate(zip(rows, effects)) if e is not None and not r.status]
    decisions = rule.decide([effects[i] for i in family], [rows[i].threshold for i in family], at_level=at_level,
                            same_at=same_at)
    for i, decision in zip(family, decisions):
        _apply(rows[i], decision, len(family))
    for row in rows:
        if not row.status:  # fewer than two paired rounds: no spread to test with
            row.status = "undecided"
            row.notes.append(f"{row.rounds} round(s) ok on both sides; a paired test needs 2 or more")
    return rows


def at_look(records: pd.DataFrame, thresholds: Thresholds, rounds: int, first: int, horizon: int) -> list[PairedRow]:
    """``analyse`` at the look after ``rounds`` rounds of a check that looks from round ``first`` to ``horizon``
    (``looks``): that look's levels, and the bimodal test's error spent over every look it makes."""
    looked = looks.fractions(rounds, first, horizon)
    return analyse(records, thresholds, looks.at_level(looked), looks.same_level(looked),
                   len(looks.look_rounds(first, horizon)))


def _config(rung: int, group: pd.DataFrame, thresholds: Thresholds,
            bimodal_level: float = 0.0) -> tuple[PairedRow, rule.Effect | None]:
    """A config's row before Holm: its runs, failures, busy and bimodal runs; the effect to test (None: nothing
    to test)."""
    work = group[group["against_side"] == WORK]
    first = (work if len(work) else group).iloc[0]
    row = PairedRow(status="", rung=rung, workload=str(first["workload"] or ""), ladder=str(first["ladder"] or ""),
                    change=str(first["change"] or ""), config_hash=str(first["config_hash"] or ""))
    row.threshold = thresholds.get(row.workload, row.ladder, rung)
    row.busy = [f"{side} round {_int(r['round'])}: {reason}" for side in SIDES
                for _, r in group[group["against_side"] == side].iterrows() if (reason := busy_reason(r))]
    ok = {side: _ok_by_round(group[group["against_side"] == side]) for side in SIDES}
    for side, key in ((REF, "ref_samples_per_s"), (WORK, "work_samples_per_s")):
        if ok[side]:
            setattr(row, key, float(np.exp(np.mean(np.log(list(ok[side].values()))))))
    both = sorted(set(ok[REF]) & set(ok[WORK]))
    pairs = [math.log(ok[WORK][k] / ok[REF][k]) for k in both]
    second = _work_second(group, both)
    row.rounds = len(pairs)
    if pairs:
        row.ratio = float(math.exp(np.mean(pairs)))
    if row.busy:
        row.status = "busy"
        more = f"; {len(row.busy) - 1} more" if len(row.busy) > 1 else ""
        row.notes.append(f"machine busy in {len(row.busy)} of {len(group)} runs, no verdict ({row.busy[0]}{more})")
        return row, None
    if _failures(row, group, ok):
        return row, None
    if _bimodal(row, ok, bimodal_level):
        return row, None
    note = order_note(pairs, second) if second else ""
    if note:
        row.notes.append(note)
    return row, round_effect(pairs, second)


def _bimodal(row: PairedRow, ok: dict[str, dict[int, float]], level: float) -> bool:
    """Set the status of a config whose runs on a side land at two speeds (``bimodal.bimodal`` at ``level``); True
    when they do: its ratio would mix the two speeds, so it gets no verdict, and the row says what to do."""
    found = [(side, got) for side in SIDES if level > 0 and (got := bimodal.bimodal(ok[side].values(), level))]
    if not found:
        return False
    row.status = "bimodal"
    side, got = found[0]
    row.notes.append(f"{'REF' if side == REF else 'working tree'}'s runs are {got.describe()}: no verdict; "
                     f"{bimodal.ADVICE}")
    return True


def _work_second(group: pd.DataFrame, rounds: list[int]) -> list[int] | None:
    """+1 for each round of ``rounds`` whose working-tree run came after REF's, -1 before (by the runs'
    timestamps); None when the order is not known."""
    if "timestamp" not in group:
        return None
    when = {(int(r), str(side)): str(t) for r, side, t in zip(group["round"].fillna(-1), group["against_side"],
                                                             group["timestamp"]) if isinstance(t, str) and t}
    if any((r, side) not in when for r in rounds for side in SIDES) or any(when[(r, WORK)] == when[(r, REF)]
                                                                       for r in rounds):
        return None  # a missing timestamp, or two in the same second (the record's precision): order unknown
    return [1 if when[(r, WORK)] > when[(r, REF)] else -1 for r in rounds]


def round_effect(log_ratios: list[float], work_second: list[int] | None = None) -> rule.Effect | None:
    """The effect of one config from its rounds' log ratios work/REF: their mean, its standard error, rounds - 1
    degrees of freedom (None with fewer than two rounds: no spread to test with). With ``work_second`` (+1 where
    the working tree ran second in the round, -1 where REF did) and both orders among 3 or more rounds, the side
    order is a term of the model (``round_fit``)."""
    if len(log_ratios) < 2:
        return None
    if work_second is not None and len(log_ratios) >= 3 and len(set(work_second)) == 2:
        fit = round_fit(np.asarray(log_ratios, dtype=float), np.asarray(work_second, dtype=float))
        return rule.Effect(float(fit["diff"]), float(fit["se"]), float(fit["df"]))
    sd = float(np.std(log_ratios, ddof=1))
    return rule.Effect(float(np.mean(log_ratios)), sd / math.sqrt(len(log_ratios)), len(log_ratios) - 1)


def round_fit(diffs: np.ndarray, work_second: np.ndarray) -> dict[str, np.ndarray]:
    """The effect over the last axis of ``diffs`` (rounds' log ratios; ``work_second`` as in ``order_fit``, both
    orders present, 3 or more rounds): the order-free effect on rounds - 2 df (``order_fit``), always. Choosing
    the model by a pretest of the order (the plain mean on rounds - 1 df where the order looked unclear) used the
    same data twice: at the threshold's edge, one config, 4 rounds, it called 6.8% of checks regressed instead of
    5% (docs/statistics.md). The term costs a degree of freedom where there is no order effect; where a warm
    cache makes the second run 3% faster it halves the undecided checks."""
    return order_fit(diffs, work_second)


def order_fit(diffs: np.ndarray, work_second: np.ndarray) -> dict[str, np.ndarray]:
    """Least squares of the rounds' log ratios on the side order (a crossover's period term), over the last axis:
    log(work / REF) = diff + order x work_second + noise. ``order`` is how much faster the second run of a pair
    is (log; a warm page cache); taking it out leaves it out of the variance too. Returns diff, se, order,
    order_se and df (rounds - 2); ``work_second`` holds +1 and -1 (both orders must occur)."""
    n = diffs.shape[-1]
    s = np.broadcast_to(work_second, diffs.shape)
    total, order_sum, cross = diffs.sum(-1), s.sum(-1), (s * diffs).sum(-1)
    det = n * n - order_sum ** 2  # sum(s * s) is n
    diff = (n * total - order_sum * cross) / det
    order = (n * cross - order_sum * total) / det
    residual = diffs - diff[..., None] - order[..., None] * s
    variance = (residual ** 2).sum(-1) / (n - 2)
    return {"diff": diff, "se": np.sqrt(variance * n / det), "order": order, "order_se": np.sqrt(variance * n / det),
            "df": np.full(diff.shape, n - 2.0)}


def order_note(log_ratios: list[float], work_second: list[int]) -> str:
    """Words for a side-order effect worth naming (the second run of a pair faster or slower by 1% or more, and
    2.58 standard errors from none), else ""."""
    if len(log_ratios) < 3 or len(set(work_second)) < 2:
        return ""
    fit = order_fit(np.asarray(log_ratios, dtype=float), np.asarray(work_second, dtype=float))
    order, se = float(fit["order"]), float(fit["order_se"])
    if abs(order) < ORDER_NOTE or not abs(order) > 2.58 * se:
        return ""
    faster = "faster" if order > 0 else "slower"
    return (f"the second run of each pair is {abs(math.expm1(order)):.0%} {faster} (taken out of the ratio: a term of "
            f"the model, one degree of freedom): {'a warm cache?' if order > 0 else 'heat or a throttle?'}")


def _failures(row: PairedRow, group: pd.DataFrame, ok: dict[str, dict[int, float]]) -> bool:
    """Set the status of a config that failed on a side; True when it did (no throughput verdict then)."""
    failed = {side: group[(group["against_side"] == side) & (group["status"] != "ok")] for side in SIDES}
    if not len(failed[REF]) and not len(failed[WORK]):
        return False
    if set(group["status"]) == {"skipped"}:
        row.status = "skipped"
        row.notes.append(f"skipped on both sides: {_first_error(group)}")
    elif len(failed[WORK]) and ok[REF]:
        row.status = "regressed"
        rounds = len(group[group["against_side"] == WORK])
        row.notes.append(f"the working tree now gets {_statuses(failed[WORK])} in {len(failed[WORK])} of {rounds} "
                         f"rounds (REF ran ok): {_first_error(failed[WORK])}")
    elif ok[WORK] and not ok[REF]:
        row.status = "improved"
        row.notes.append(f"REF got {_statuses(failed[REF])}; the working tree runs ok")
    elif not ok[WORK] and not ok[REF]:
        row.status = "failed"
        row.notes.append(f"failed on both sides ({_statuses(group)}): {_first_error(group)}")
    else:  # REF failed in some rounds, the working tree never: the ok rounds still pair
        row.notes.append(f"REF got {_statuses(failed[REF])} in {len(failed[REF])} round(s)")
        return False
    return True


def _apply(row: PairedRow, decision: rule.Decision, family: int) -> None:
    row.ratio, row.p_value, row.level = decision.ratio, decision.p_value, decision.level
    if decision.has_band:
        row.lower, row.upper = decision.lower, decision.upper
    row.status = rule.status(decision, row.threshold)
    if row.status == "regressed":
        row.notes.append(f"throughput {decision.ratio - 1:+.1%}, at most {decision.upper - 1:+.1%} at "
                         f"{decision.level:.1%} one-sided: beyond the -{row.threshold:.0%} threshold "
                         f"(Holm over {family})")
    elif row.status == "undecided":
        row.notes.append(f"throughput {decision.ratio - 1:+.1%}, band [{decision.lower:.3f}, {decision.upper:.3f}] "
                         f"holds {1 - row.threshold:.2f}: neither beyond nor within the threshold yet; more rounds "
                         "narrow it")


def _ok_by_round(side: pd.DataFrame) -> dict[int, float]:
    ok = side[(side["status"] == "ok") & (side["samples_per_s"].fillna(0) > 0)]
    return {int(r): float(v) for r, v in zip(ok["round"].fillna(0), ok["samples_per_s"])}


def _statuses(frame: pd.DataFrame) -> str:
    return ", ".join(dict.fromkeys(str(s) for s in frame["status"] if s != "ok"))


def _first_error(frame: pd.DataFrame) -> str:
    """The first run's error, by its last line (a traceback ends with the exception)."""
    for error in frame["error"].fillna(""):
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        if lines:
            return lines[-1][:200]
    return "no message"


def _int(value) -> str:
    return "?" if value is None or pd.isna(value) else str(int(value))
