"""A claim about the data part (``component: data``) judged on the loop's pace: the loader's speedup is the loop's own
while the loop waits on its loader, before the change and after it (at least :data:`PACED_WAIT` of its step); only a
lower bound once the loader outruns the model; not measurable where the loop did not wait on it before.

The wait is read from all a rung's runs, as ``bound.of_runs`` reads what limits the loop: runs on both sides of
:data:`PACED_WAIT` give both readings with their range, and no pick between them; one run near it says what another
run of the same settings may read. The error rates are simulated in ``tests/test_data_part.py``. Plain Python.
"""

from __future__ import annotations

from harness.analysis.stats import speedup
from harness.analysis.views import bound
from harness.analysis.views.rows import RungRow

PACED_WAIT = bound.HOST_WAITING  # a loop blocked on its loader at least this share of its step runs at its pace


def verdict(new: RungRow, old: RungRow, low: float, high: float,
            measured: speedup.Ratio | None) -> tuple[speedup.Ratio | None, str]:
    """(the ratio judged, the verdict's text) on a claim ``low``-``high`` about the loader's speedup of ``new`` over
    ``old``, from the loop's end-to-end ratio ``measured``; see the module docstring."""
    if measured is None or old.data_wait_frac is None or new.data_wait_frac is None:
        return None, ""
    before, after, x = _waited(old), _waited(new), measured.value
    said = speedup.verdict(measured, low, high)
    if before.over is None:  # its pace where the loop still waits after the change, a lower bound where it does not
        paced = f"{said} at loader {x:.2f}x" if after.over else f"loader at least {x:.2f}x"
        return measured, (f"inconclusive (data: {paced} where the loader set the loop's pace, not measurable where "
                          f"it did not: {before.spread(WAITED, 'waiting')})")
    if not before.over:
        return None, (f"not measurable here: the loop waited on data {old.data_wait_frac:.0%} of its step before the "
                      "change, so the loader did not set its pace" + _near(before, "before"))
    at_least = measured.low >= low  # at least the claim, whatever the loader's own speed is now
    if after.over is None and (at_least or said.startswith("inconclusive")):  # both readings say the same
        text = f"{said} (data: loader {x:.2f}x, or at least that where the model set the pace: {_now(after)})"
    elif after.over is None:
        text = (f"inconclusive (data: {said} at loader {x:.2f}x where the loader still set the pace, loader at least "
                f"{x:.2f}x where the model did: {_now(after)})")
    elif after.over:
        text = f"{said} (data: loader {x:.2f}x)"
    elif at_least:
        text = f"{said} (data: loader at least {x:.2f}x)"
    else:
        text = (f"inconclusive (data: loader at least {x:.2f}x; the loop now waits {new.data_wait_frac:.0%}, "
                "the model sets the pace)")
    return measured, text + _near(before, "before") + _near(after, "after")


WAITED = "the loop waited on data {} of its step before the change"


def _now(after: bound.Side) -> str:
    return after.spread("the loop now waits {} of its step", "waiting")


def _waited(row: RungRow) -> bound.Side:
    """The rung's runs' waits on the loader against :data:`PACED_WAIT`."""
    return (bound.side([wait for wait, _ in row.parts.shares], PACED_WAIT)
            or bound.side([row.data_wait_frac], PACED_WAIT))


def _near(waits: bound.Side, when: str) -> str:
    """" (one run before the change: 22% waiting, within 5 points of 20%: another run ... may read the loader not
    setting its pace)" for one run near the line ("" otherwise)."""
    near = waits.near("{:.0%} waiting", lambda over: f"the loader {'' if over else 'not '}setting its pace")
    return f" (one run {when} the change: {near})" if near else ""
