"""The simulations behind docs/statistics.md: error rates, coverage and power of the harness's statistics.

    python benchmarks/statistics_sim.py [--trials 20000] [--seed 1] [--update docs/statistics.md]

Seeded Monte Carlo on the harness's own functions (``harness.analysis.stats.statsim`` drives ``blocks``,
``sequential``, ``checkstats`` and ``speedup.verdict_codes``); log-normal process noise, a round effect of
2% shared by the rungs of a round. Prints markdown tables; ``--update FILE`` replaces the part of FILE
between the markers ``<!-- statistics_sim:begin -->`` and ``<!-- statistics_sim:end -->`` with them.
No timing: it takes about a minute or two on one core at the default trial count, whatever the machine.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.analysis.stats import blocks, sequential, speedup  # noqa: E402
from harness.analysis.stats import statsim as sim  # noqa: E402
from harness.analysis.stats.noise_model import detectable_speedup  # noqa: E402

BEGIN, END = "<!-- statistics_sim:begin -->", "<!-- statistics_sim:end -->"
CVS = (0.02, 0.05, 0.10)
FALSE = (speedup.CONFIRMS, speedup.SHORT, speedup.EXCEEDS, speedup.REVERSES)  # a change asserted where there is none
CLAIM = (1.1, 1.3)


def table(header: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def false_rate(codes: np.ndarray) -> np.ndarray:
    """Per question: the share of trials with a verdict asserting a change (the truth is no change)."""
    return np.isin(codes, FALSE).mean(axis=0)


def old_rule(logs: np.ndarray, new: int, old: int) -> tuple[np.ndarray, np.ndarray]:
    """The rule before the block model: Welch on the two rungs' runs (2+ each), else a known CV of 5%."""
    a, b = logs[:, new], logs[:, old]
    n = a.shape[1]
    diff = a.mean(axis=1) - b.mean(axis=1)
    if n == 1:
        half = np.full(len(diff), sps.norm.isf(0.025) * 0.05 * math.sqrt(2))
    else:
        va, vb = a.var(axis=1, ddof=1) / n, b.var(axis=1, ddof=1) / n
        df = (va + vb) ** 2 / (va ** 2 / (n - 1) + vb ** 2 / (n - 1))
        half = sps.t.isf(0.025, df) * np.sqrt(va + vb)
    return np.exp(diff - half), np.exp(diff + half)


# ------------------------------------------------------------------------------------------
# the fixed-rounds model


def aa_fixed(rng, trials: int) -> str:
    rows = []
    for rungs in (4, 8):
        for rounds in (2, 3, 4, 6):
            for cv in CVS:
                logs = sim.sweep_logs(rng, trials, np.zeros(rungs), rounds, sim.Machine(cv=cv))
                rates = false_rate(sim.fixed_codes(logs, CLAIM))
                covers = sim.total_covers(logs, 0.0).mean()
                low, high = old_rule(logs, 1, 0)
                rows.append([rungs, rounds, pct(cv), pct(rates.mean()), pct(rates.max()), pct(covers),
                             pct(((low > 1) | (high < 1)).mean())])
    return table(["rungs", "rounds", "CV", "false verdicts, mean over rungs", "worst rung", "total's band covers",
                  "old rule (Welch) false"], rows)


def power_fixed(rng, trials: int) -> str:
    rows = []
    for cv, true_speedup in ((0.02, 1.08), (0.05, 1.2), (0.10, 1.2)):
        for rungs in (4, 8):
            for rounds in (1, 2, 3, 4):
                steps = np.zeros(rungs)
                steps[1] = math.log(true_speedup)
                logs = sim.sweep_logs(rng, trials, steps, rounds, sim.Machine(cv=cv))
                new = sim.fixed_codes(logs, (1.05, 1.5))[:, 0] == speedup.CONFIRMS if rounds > 1 else np.zeros(1)
                low, _ = old_rule(logs, 1, 0)
                rows.append([f"{true_speedup}x", pct(cv), rungs, rounds, pct(new.mean()), pct((low > 1).mean())])
    return table(["true speedup", "CV", "rungs", "rounds", "confirmed (block model)", "band > 1x (old rule)"], rows)


def heteroscedastic(rng, trials: int) -> str:
    rows = []
    for factor in (1.0, 2.0, 3.0):
        for rounds in (2, 3, 4, 6):
            logs = sim.sweep_logs(rng, trials, np.zeros(6), rounds, sim.Machine(cv=0.05, noisy_rung=2,
                                                                                   noisy_factor=factor))
            model = blocks.fit(logs)
            cells = []
            for level in (1e-9, 0.05, 0.10, 0.25):
                c = blocks.contrast(model, 2, 1, check_level=level)
                low, high = c.bounds(0.05)
                cells.append(pct(((low > 1) | (high < 1)).mean()))
            rows.append([f"{factor:g}x", rounds, *cells])
    return table(["noisy rung's CV / others'", "rounds", "pooled only", "check at 5%", "check at 10% (chosen)",
                  "check at 25%"], rows)


def calibration_branch(rng, trials: int) -> str:
    rows = []
    for true_cv in (0.02, 0.04, 0.08):
        for rounds in (1, 2, 3):
            logs = sim.sweep_logs(rng, trials, np.zeros(4), rounds, sim.Machine(cv=true_cv))
            calibrated = np.std(rng.normal(0, 0.02, (trials, 5)), axis=1, ddof=1)  # 5 runs at 2%, earlier
            cells = []
            for level in (0.0, 0.10, blocks.CALIBRATION_CHECK_LEVEL, 0.5):
                c = blocks.contrast(blocks.fit(logs, calibrated, 4, check_level=level), 1, 0)
                low, high = c.bounds(0.05)
                cells.append(pct(((low > 1) | (high < 1)).mean()))
            steps = [0.0, math.log(1.05), 0.0, 0.0]
            fast = sim.sweep_logs(rng, trials, steps, rounds, sim.Machine(cv=true_cv))
            for level in (0.10, blocks.CALIBRATION_CHECK_LEVEL, 0.5):
                low, _ = blocks.contrast(blocks.fit(fast, calibrated, 4, check_level=level), 1, 0).bounds(0.05)
                cells.append(pct((low > 1).mean()))
            rows.append([pct(true_cv), rounds, *cells])
    return table(["CV during the sweep (calibrated earlier: 2%, 5 runs)", "rounds", "A/A: pooled blindly",
                  "F test at 10%", "at 25% (chosen)", "at 50%", "1.05x shown: F test at 10%", "at 25% (chosen)",
                  "at 50%"], rows)


# ------------------------------------------------------------------------------------------
# one run a rung and no calibration; drift and run order; claims that hold 1x


def one_run(rng, trials: int) -> str:
    rows = []
    for cv in (0.02, 0.05, 0.10, 0.20):
        cells = []
        for true_speedup in (1.0, 1.5, 2.0):
            logs = sim.sweep_logs(rng, trials, [0.0, math.log(true_speedup)], 1, sim.Machine(cv=cv))
            for prior_df in (math.inf, 1, 2):
                if math.isinf(prior_df):
                    low, high = old_rule(logs, 1, 0)
                else:
                    low, high = blocks.contrast(blocks.fit(logs, 0.05, prior_df), 1, 0).bounds(0.05)
                hit = ((low > 1) | (high < 1)) if true_speedup == 1.0 else (low > 1)
                cells.append(pct(hit.mean()))
            cells.append("0.0%")  # no band: "add repeats or calibrate"
        rows.append([pct(cv)] + cells)
    head = ["true CV"]
    for what in ("A/A: change asserted", "1.5x: faster shown", "2x: faster shown"):
        head += [f"{what}, CV 5% known (old)", "prior 1 df", "prior 2 df", "no verdict (chosen)"]
    return table(head, rows)


def drift(rng, trials: int) -> str:
    rows = []
    for rounds in (2, 3, 4, 6):
        cells = []
        for order in ("same", "serpentine"):
            logs = sim.sweep_logs(rng, trials, np.zeros(6), rounds, sim.Machine(cv=0.02, drift=-0.002), order=order)
            cells += [pct(sim.total_covers(logs, 0.0).mean()), pct(false_rate(sim.fixed_codes(logs, CLAIM)).mean())]
        rows.append([rounds] + cells)
    return table(["rounds", "same order: total's band holds 1x", "same order: rung false verdicts",
                  "serpentine: total's band holds 1x", "serpentine: rung false verdicts"], rows)


def claims_holding_one(rng, trials: int) -> str:
    rows = []
    for truth in (0.90, 0.95, 1.0, 1.02):
        for rounds in (2, 3):
            logs = sim.sweep_logs(rng, trials, [0.0, math.log(truth), 0.0], rounds, sim.Machine(cv=0.05))
            low, high = blocks.contrast(blocks.fit(logs), 1, 0).bounds(0.05)
            old = (high >= 1.0) & (low <= 1.05)
            new = speedup.verdict_codes(low, high, 1.0, 1.05) == speedup.CONFIRMS
            rows.append([f"{truth}x", rounds, pct(old.mean()), pct(new.mean())])
    return table(["true ratio", "rounds", "confirmed, old rule (band overlaps)", "confirmed, band inside (new)"],
                 rows)


# ------------------------------------------------------------------------------------------
# sequential rounds


def questions(rungs: int) -> list[sequential.Question]:
    out = [sequential.Question(f"rung {k}", k, k - 1, CLAIM) for k in range(1, rungs)]
    return out + [sequential.Question("total", rungs - 1, 0, None, 0, rungs - 1)]


def sequential_table(rng, trials: int, budget: int = 6) -> str:
    rows = []
    for cv in CVS:
        for true_speedup in (1.0, 1.2):
            steps = [0.0, math.log(true_speedup), 0.0, 0.0]
            logs = sim.sweep_logs(rng, trials, steps, budget, sim.Machine(cv=cv))
            fixed = sim.fixed_codes(logs, CLAIM)
            cells = [pct(false_rate(fixed[:, 1:]).mean()), pct((fixed[:, 0] == speedup.CONFIRMS).mean()), str(budget)]
            for spending in ("naive", "pocock", "obrien-fleming"):
                res = sim.run_sequential(logs, questions(4), budget, spending=spending)
                cells += [pct(res.ever_excluded_one[:, 1:3].mean()), pct((res.codes[:, 0] == speedup.CONFIRMS).mean()),
                          f"{res.rounds.mean():.2f}"]
            rows.append([pct(cv), f"{true_speedup}x"] + cells)
    head = ["CV", "rung 1"]
    for what in (f"fixed {budget} rounds", "naive looks (95% each round)", "Pocock", "O'Brien-Fleming (chosen)"):
        head += [f"{what}: A/A rungs, change asserted", "rung 1 confirmed", "rounds"]
    return table(head, rows)


def check_table(rng, trials: int) -> str:
    rows = []
    for paired in (True, False):
        for looks in (False, True):
            for configs in (4, 13):
                cells = []
                for cv in CVS:
                    aa = sim.check_family_error(rng, trials, configs, 6, sim.Machine(cv=cv), paired, looks)
                    slow = sim.check_family_error(rng, trials // 4, configs, 6, sim.Machine(cv=cv), paired, looks,
                                                  slowdown=math.log(1 / 0.9))
                    cells += [pct(aa.mean()), pct(slow.mean())]
                rows.append(["paired rounds" if paired else "saved baseline (3 rounds)",
                             "after every round" if looks else "once, after 6", configs] + cells)
    head = ["design", "looks", "configs"]
    for cv in CVS:
        head += [f"CV {pct(cv)}: A/A flagged", "0.9x flagged"]
    return table(head, rows)


# ------------------------------------------------------------------------------------------
# power arithmetic checked by simulation


def power_checks(rng, trials: int) -> str:
    rows = []
    for cv in CVS:
        for repeats in (1, 2, 3):
            x = detectable_speedup(cv, 4, repeats)
            logs = sim.sweep_logs(rng, trials, [0.0, math.log(x)], repeats, sim.Machine(cv=cv))
            calibrated = np.std(rng.normal(0, cv, (trials, 5)), axis=1, ddof=1)
            low, _ = blocks.contrast(blocks.fit(logs, calibrated, 4), 1, 0).bounds(0.05)
            rows.append(["detectable_speedup", pct(cv), repeats, f"{x:.3f}x", pct((low > 1).mean())])
    rows += _repeats_check(rng, trials)
    return table(["function", "CV", "runs per rung", "answer", "decided in simulation"], rows)


def _repeats_check(rng, trials: int) -> list[list]:
    rows = []
    for cv in (0.02, 0.05):
        logs = sim.sweep_logs(rng, trials, [0.0, math.log(1.05)], 2, sim.Machine(cv=cv))
        c = blocks.contrast(blocks.fit(logs), 1, 0)
        decided, asked = [], 0
        for t in range(min(trials, 400)):
            r = c.ratio(0.05, trial=t)
            if speedup.verdict_codes(r.low, r.high, *CLAIM) != speedup.INCONCLUSIVE:
                continue
            n = speedup.repeats_to_decide(r, *CLAIM)
            if n is None or n > 30:
                continue
            asked += 1
            again = sim.sweep_logs(rng, 200, [0.0, math.log(r.value)], n, sim.Machine(cv=float(r.se)))
            low, high = blocks.contrast(blocks.fit(again), 1, 0).bounds(0.05)
            decided.append(np.isin(speedup.verdict_codes(low, high, *CLAIM), speedup.DECIDED_CODES).mean())
        rows.append(["repeats_to_decide", pct(cv), f"its answer ({asked} bands)", "2 to 30",
                     pct(float(np.mean(decided)))])
    return rows


SECTIONS = (
    ("A/A sweeps, fixed rounds: false verdicts per rung and the total's coverage", aa_fixed),
    ("Power: a true speedup at rung 1, claim 1.05-1.5x", power_fixed),
    ("One rung noisier than the rest (6 rungs, CV 5%): rung 2 over rung 1, A/A", heteroscedastic),
    ("A calibration that may no longer hold (4 rungs): rung 1 over rung 0", calibration_branch),
    ("One run a rung, no calibration: the options", one_run),
    ("Drift of 0.2% per run (6 rungs, CV 2%): run order", drift),
    ("Claims that hold 1x (1.0-1.05x), CV 5%", claims_holding_one),
    ("sweep.repeats=auto: budget 6 rounds, 4 rungs, claims 1.1-1.3x, CV as shown", sequential_table),
    ("check: family-wise error (Holm) and power, budget 6 rounds", check_table),
    ("The power arithmetic against simulation (80% wanted)", power_checks),
)


def report(trials: int, seed: int) -> str:
    parts = [f"Generated by `python benchmarks/statistics_sim.py --trials {trials} --seed {seed}` "
             "(seeded: the same numbers on any machine)."]
    for i, (title, make) in enumerate(SECTIONS):
        rng = np.random.default_rng([seed, i])
        count = trials if make not in (check_table, one_run, power_checks) else max(trials // 4, 500)
        parts.append(f"#### {title}\n\n{make(rng, count)}")
    return "\n\n".join(parts)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/statistics_sim.py", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20000, help="simulated sweeps per cell (default 20000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--update", metavar="FILE", help="replace FILE's part between the markers with the tables")
    args = parser.parse_args(argv)
    text = report(args.trials, args.seed)
    if not args.update:
        print(text)
        return 0
    path = Path(args.update)
    doc = path.read_text()
    if BEGIN not in doc or END not in doc:
        print(f"error: {path} has no {BEGIN} ... {END} markers", file=sys.stderr)
        return 2
    head, rest = doc.split(BEGIN, 1)
    path.write_text(head + BEGIN + "\n" + text + "\n" + END + rest.split(END, 1)[1])
    print(f"updated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
