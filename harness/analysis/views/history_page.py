"""The history as one self-contained HTML page: an index, then per config a chart and a table (no torch).

Charts are inline SVG drawn here (no plotting library, no script): sessions in time order along x, labelled
with their date and commit; throughput with its 95% band up y, on a log scale; each gate's verdict marked above
the session it judged (red: regressed, green: ok, orange: busy, grey: undecided); each change point of the sweeps'
level (``harness.analysis.views.changepoints``) a dashed line with its kind (step, slope, or undecided: within the
sweeps' wander) and size. Hovering a point or a mark shows its environment and numbers.
"""

from __future__ import annotations

import html
import math
import time

from harness.analysis.views.history import ChangePoint, ConfigHistory, History, Mark, Point

WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 1100, 300, 70, 20, 34, 70
COLOURS = {"sweep": "#1565c0", "check REF": "#757575", "check work": "#6a1b9a"}
DECISION_COLOURS = {"regressed": "#c62828", "ok": "#2e7d32", "busy": "#ef6c00", "undecided": "#9e9e9e"}
STYLE = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 24px auto; max-width: 1200px;
       color: #222; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 36px; border-bottom: 1px solid #ddd; }
.meta { color: #666; font-size: 13px; } .legend span { margin-right: 16px; }
table { border-collapse: collapse; font-size: 12px; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.regressed { color: #c62828; font-weight: bold; } .ok { color: #2e7d32; font-weight: bold; }
.busy { color: #ef6c00; font-weight: bold; } .undecided { color: #757575; font-weight: bold; }
svg { border: 1px solid #eee; background: #fff; }
svg text { font-size: 11px; fill: #444; }
"""


def _e(text) -> str:
    return html.escape(str(text))


def _num(value, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def page(history: History) -> str:
    """The whole page."""
    generated = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>harness history</title>",
             f"<style>{STYLE}</style></head><body>", "<h1>Throughput history and gate verdicts</h1>",
             f"<p class='meta'>{_e(history.results_dir)}: {len(history.configs)} config(s); generated {generated}. "
             "Each point is one session (a sweep, or one side of a <code>check --against</code>): the geometric mean "
             "of its runs' samples/s with the 95% band (a one-run session is a point without one). Marks above "
             "the points are the checks' verdicts; a dashed line is a change point of the sweeps' level.</p>",
             _legend(), _index(history)]
    for config in history.configs:
        parts += [f"<h2 id='{config.anchor}'>{_e(config.title)}</h2>",
                  f"<p class='meta'>config {_e(config.config_hash)} on {_e(config.hardware)}</p>",
                  chart(config), steps_text(config, history.results_dir), _table(config)]
    parts.append("</body></html>")
    return "\n".join(parts)


def _legend() -> str:
    dots = "".join(f"<span><b style='color:{c}'>&#9679;</b> {_e(s)}</span>" for s, c in COLOURS.items())
    marks = "".join(f"<span class='{d}'>&#9660; {d}</span>" for d in DECISION_COLOURS)
    return f"<p class='legend meta'>{dots}{marks}<span>&#9711; saved as a baseline</span></p>"


def _last_mark(config: ConfigHistory) -> Mark | None:
    return max(config.marks, key=lambda m: m.when) if config.marks else None


def _index(history: History) -> str:
    rows = ["<table><tr><th>config</th><th>hardware</th><th>sessions</th><th>latest samples/s</th>"
            "<th>latest verdict</th></tr>"]
    for c in history.configs:
        last = _last_mark(c)
        verdict = (f"<span class='{last.decision}'>{last.decision}</span> ({_e(last.kind)} {_e(last.against)}, "
                   f"{_e(last.when[:16])})" if last else "-")
        latest = next((p for p in reversed(c.points) if p.samples_per_s is not None), None)
        rows.append(f"<tr><td><a href='#{c.anchor}'>{_e(c.title)}</a></td><td>{_e(c.hardware)}</td>"
                    f"<td class='num'>{len(c.points)}</td>"
                    f"<td class='num'>{_num(latest.samples_per_s if latest else None)}</td><td>{verdict}</td></tr>")
    return "\n".join(rows + ["</table>"])


def chart(config: ConfigHistory) -> str:
    """One config's SVG: points with bands on a log scale (ratios read as distances), sessions along x, verdict
    marks above the sessions they judged. The scale follows the points; a band beyond it is cut at the edge."""
    points = config.points
    values = [p.samples_per_s for p in points if p.samples_per_s] or [1.0]
    low, high = math.log(min(values) / 1.25), math.log(max(values) * 1.25)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = plot_w / max(len(points), 1)

    def x(i: int) -> float:
        return LEFT + step * (i + 0.5)

    def y(v: float) -> float:
        return TOP + plot_h * (1 - (min(max(math.log(v), low), high) - low) / (high - low))

    out = [f"<svg width='{WIDTH}' height='{HEIGHT}' viewBox='0 0 {WIDTH} {HEIGHT}' role='img'>",
           f"<text x='{LEFT}' y='14'>samples/s (log scale)</text>"]
    for k in range(5):
        v = math.exp(low + (high - low) * k / 4)
        out.append(f"<line x1='{LEFT}' x2='{WIDTH - RIGHT}' y1='{y(v):.1f}' y2='{y(v):.1f}' stroke='#eee'/>"
                   f"<text x='{LEFT - 6}' y='{y(v) + 4:.1f}' text-anchor='end'>{v:.3g}</text>")
    out += [_point(p, x(i), y) for i, p in enumerate(points)]
    out += [_tick(p, x(i), HEIGHT - BOTTOM) for i, p in enumerate(points)]
    out += [_step(c, (x(c.before) + x(c.after)) / 2) for c in config.steps]
    sessions = {p.session: i for i, p in enumerate(points) if p.source != "check REF"}
    for m in config.marks:
        if m.session in sessions:
            out.append(_mark(m, x(sessions[m.session])))
    out.append("</svg>")
    return "".join(out)


def _point(p: Point, x: float, y) -> str:
    colour = COLOURS.get(p.source, "#1565c0")
    tip = (f"{p.when}  {p.source} {p.session}\ncommit {p.commit or '?'}\n"
           f"{_num(p.samples_per_s)} samples/s, 95% band [{_num(p.low)}, {_num(p.high)}], {p.ok}/{p.runs} runs ok\n"
           f"{p.environment}" + (f"\nBUSY: {p.busy}" if p.busy else "")
           + (f"\nsaved as baseline {', '.join(p.baselines)}" if p.baselines else ""))
    if p.samples_per_s is None:
        return (f"<g><title>{_e(tip)}</title><text x='{x:.1f}' y='{HEIGHT - BOTTOM - 4}' text-anchor='middle' "
                "fill='#c62828'>&#215; failed</text></g>")
    parts = [f"<g><title>{_e(tip)}</title>"]
    if p.low is not None and p.high is not None:
        parts.append(f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{y(p.low):.1f}' y2='{y(p.high):.1f}' stroke='{colour}' "
                     f"stroke-width='2'/>")
    fill = "white" if p.busy else colour
    stroke = DECISION_COLOURS["busy"] if p.busy else colour
    parts.append(f"<circle cx='{x:.1f}' cy='{y(p.samples_per_s):.1f}' r='5' fill='{fill}' stroke='{stroke}' "
                 "stroke-width='2'/>")
    if p.baselines:
        parts.append(f"<circle cx='{x:.1f}' cy='{y(p.samples_per_s):.1f}' r='9' fill='none' stroke='#b8860b'/>")
    return "".join(parts) + "</g>"


def _step(c: ChangePoint, x: float) -> str:
    """A change point: a dashed line between the last session before it and the first after, with its size."""
    colour = DECISION_COLOURS["regressed"] if c.ratio < 1 else DECISION_COLOURS["ok"]
    kind = "undecided" if c.undecided else "slope" if c.slope else "step"
    what = f"{kind}: a step or the sessions' wander" if c.undecided else kind
    tip = f"change point ({what}): {c.ratio - 1:+.1%} between {c.good or '?'} and {c.bad or '?'}"
    return (f"<g class='step'><title>{_e(tip)}</title><line x1='{x:.1f}' x2='{x:.1f}' y1='{TOP}' "
            f"y2='{HEIGHT - BOTTOM}' stroke='{colour}' stroke-dasharray='4,3'/><text x='{x + 4:.1f}' y='{TOP + 12}' "
            f"fill='{colour}'>{kind} {c.ratio - 1:+.1%}</text></g>")


def steps_text(config: ConfigHistory, results_dir: str) -> str:
    """The change points of a config, each with the command that bisects it."""
    if not config.steps:
        return ""
    items = [f"<li>{c.ratio - 1:+.1%} between {_e(c.good or '?')} and {_e(c.bad or '?')}: "
             + (_e(why) if (why := no_bisect_why(c)) else f"<code>{_e(bisect_command(c, results_dir))}</code>")
             + "</li>" for c in config.steps]
    return "<p class='meta'>Change points (sweeps only):</p><ul class='meta'>" + "".join(items) + "</ul>"


SLOPE_WHY = ("a slope (successive steps the same way): a drift over several sessions, not one commit; compare the "
             "environments of its sessions, or sweep the commits between")


WANDER_WHY = ("undecided: the level of this config's sweeps wanders (successive sweeps correlate, {rho:.2f}) and this "
              "move does not stand out of that wander: a step or a drift, the sweeps cannot tell; a paired check "
              "(check --against GOOD on BAD's code) measures both in one session and decides")


def no_bisect_why(c: ChangePoint) -> str:
    """Why a change point has no bisect command ("" when it has one): an undecided move may be no commit's, a slope
    has no one commit, and sessions of one commit (the machine, the environment or uncommitted changes moved) or of
    an unknown one leave ``bisect GOOD BAD`` no commit to try, so the command it would print could not run."""
    if c.undecided:
        return WANDER_WHY.format(rho=c.wander)
    if c.slope:
        return SLOPE_WHY
    good, bad = c.good.removesuffix("-dirty"), c.bad.removesuffix("-dirty")
    if not good or not bad:
        return f"a session's commit is not known: {NO_RANGE_WHY}"
    return f"both sessions ran commit {good}: {NO_RANGE_WHY}" if good == bad else ""


NO_RANGE_WHY = ("no commit to bisect; the step came with the machine, the environment or uncommitted changes: compare "
                "the environments of the two sessions")


def bisect_command(c: ChangePoint, results_dir: str) -> str:
    """The command line that finds the commit of a change point (as printed, it runs from the repository's top)."""
    import shlex

    return shlex.join(["python", "-m", "harness", "bisect", c.good.removesuffix("-dirty"),
                       c.bad.removesuffix("-dirty"), "--results", results_dir, "--sweep", c.bad_session])


def _tick(p: Point, x: float, base: float) -> str:
    side = {"check REF": " REF", "check work": " work"}.get(p.source, "")
    return (f"<text x='{x:.1f}' y='{base + 14:.1f}' text-anchor='middle'>{_e(p.when[5:16].replace('T', ' '))}</text>"
            f"<text x='{x:.1f}' y='{base + 28:.1f}' text-anchor='middle'>{_e(p.commit[:7] or '-')}{_e(side)}</text>")


def _mark(m: Mark, x: float) -> str:
    colour = DECISION_COLOURS[m.decision]
    band = f" [{_num(m.low, '.3f')}, {_num(m.high, '.3f')}]" if m.low is not None else ""
    tip = (f"{m.when}  check {m.check_id}\n{m.kind}: against {m.against}\n{m.decision} ({m.status}); "
           f"ratio {_num(m.ratio, '.3f')}{band}")
    triangle = f"M{x - 6:.1f},{TOP - 16} L{x + 6:.1f},{TOP - 16} L{x:.1f},{TOP - 6} Z"
    return (f"<g><title>{_e(tip)}</title><path d='{triangle}' fill='{colour}'/>"
            f"<text x='{x + 9:.1f}' y='{TOP - 8}' fill='{colour}'>{_e(m.decision)}</text></g>")


def _table(config: ConfigHistory) -> str:
    marks: dict[str, list[Mark]] = {}
    for m in config.marks:
        marks.setdefault(m.session, []).append(m)
    rows = ["<table><tr><th>when (UTC)</th><th>session</th><th>commit</th><th>samples/s</th><th>95% band</th>"
            "<th>runs ok</th><th>verdicts</th><th>environment</th></tr>"]
    for p in config.points:
        judged = [] if p.source == "check REF" else marks.get(p.session, [])
        verdict = "<br>".join(f"<span class='{m.decision}'>{m.decision}</span> {_e(m.kind)} vs {_e(m.against)}: "
                              f"{_num(m.ratio, '.3f')}x" for m in judged) or "-"
        saved = f" (baseline {_e(', '.join(p.baselines))})" if p.baselines else ""
        busy = f"<br><span class='busy'>busy: {_e(p.busy)}</span>" if p.busy else ""
        rows.append(f"<tr><td>{_e(p.when[:19].replace('T', ' '))}</td><td>{_e(p.source)} {_e(p.session)}{saved}</td>"
                    f"<td>{_e(p.commit or '-')}</td><td class='num'>{_num(p.samples_per_s)}</td>"
                    f"<td class='num'>{_num(p.low)} - {_num(p.high)}</td><td class='num'>{p.ok}/{p.runs}</td>"
                    f"<td>{verdict}</td><td>{_e(p.environment)}{busy}</td></tr>")
    return "\n".join(rows + ["</table>"])
