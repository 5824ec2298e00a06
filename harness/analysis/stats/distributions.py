"""The few distribution functions the statistics call, with ``scipy.stats``'s names (``t.ppf``, ``norm.sf``, ...), on
``scipy.special``: the same functions scipy.stats computes them with, the same numbers.

Why not ``scipy.stats`` itself: importing it costs over a second on a small CPU (interpolation, spatial, sparse and
every distribution are loaded with it), which a sweep served from the store paid before it printed a line. Here
scipy is loaded at the first value asked for, not when a statistics module is imported: a command that computes no
band (a sweep replayed from the store with one round, a table without repeats) never loads scipy at all; and the
values scipy.special gave are kept between processes (:class:`_Kept`), so that a command asking only for values an
earlier one asked for (a sweep served from the store) loads no scipy.special either.

Use it as ``from harness.analysis.stats import distributions as sps``: ``sps.t.ppf(q, df)`` as before.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from harness.fileio import keep, read_kept


# Every sweep of a ladder asks for the same few values (its bands' t quantiles at the looks' levels and the rounds'
# degrees of freedom, the calibration check's F quantiles), and importing scipy.special for them costs ~0.2 s on a
# 2-core CPU (its array-API layer wraps and documents every function as it is imported): a tenth of a cached sweep.
# So the values it gave are kept in a small file under scipy's and numpy's versions, exactly (a float's repr reads
# back as the same float); another scipy or numpy computes them anew.
# Only a call of a few values is kept, and a few dozen values a process: a numerical search (a power calculation's
# grid, a root finder's steps) is scipy's alone, never a file written at each step.
VALUES_FILE = "distribution-values.json"  # in the harness's cache folder
KEPT_VALUES = 1024  # the most values the file keeps (a sweep asks a handful)
KEPT_CALL = 16  # the most values one call may ask for to be kept
KEPT_PER_PROCESS = 64  # the most values one process adds to the file


class _Kept:
    """scipy.special's functions by name (``_special().stdtrit(df, q)``): each value read from the kept file when
    an earlier call kept it, else computed by scipy.special (imported then) and kept."""

    def __init__(self) -> None:
        self.values: dict[str, float] | None = None  # the file's, read at the first value asked for
        self.added = 0  # the values this process added to the file

    def __getattr__(self, name: str):
        return functools.partial(self.value, name)

    def value(self, name: str, *args):
        from_scipy = functools.partial(_scipy_value, name, *args)
        arrays = [np.asarray(a) for a in args]
        if any(a.dtype.kind not in "biuf" or (a.dtype.kind == "f" and a.dtype.itemsize != 8) for a in arrays):
            return from_scipy()  # another precision's loop: scipy's own, in its own dtype
        columns = np.broadcast_arrays(*(a.astype(float) for a in arrays))
        if columns[0].size > KEPT_CALL:
            return from_scipy()
        keys = [f"{name}{key!r}" for key in zip(*(c.ravel().tolist() for c in columns))]
        if self.values is None:
            self.values = read_kept(VALUES_FILE, versions())
        if all(type(self.values.get(key)) is float for key in keys):  # a float's repr reads back as a float
            return np.array([self.values[key] for key in keys], dtype=float).reshape(columns[0].shape)[()]
        out = from_scipy()
        if self.added < KEPT_PER_PROCESS:
            new = dict(zip(keys, np.broadcast_to(out, columns[0].shape).ravel().tolist()))
            self.added += len(new.keys() - self.values.keys())
            self.values = keep(VALUES_FILE, versions(), {**self.values, **new}, KEPT_VALUES)
        return out


def _scipy_value(name: str, *args):
    from scipy import special

    return getattr(special, name)(*args)


def versions() -> str:
    """The versions kept values depend on (scipy's and numpy's)."""
    import scipy  # the package alone (a few ms), not scipy.special

    return f"scipy {scipy.__version__} numpy {np.__version__}"


_KEPT = _Kept()


def _special() -> _Kept:
    """scipy.special's functions, their values kept between processes (see :class:`_Kept`): scipy.special is
    imported at the first value not kept (see the module's docstring: kept off commands that need none)."""
    return _KEPT


def _quantile(values, q, low: float, high: float, valid=True):
    """A quantile function's ``values`` with scipy.stats's edges: the support's ends at q = 0 and 1, nan for a q
    outside [0, 1] or parameters outside their range (``valid``); a scalar for scalar arguments."""
    q = np.asarray(q, dtype=float)
    out = np.where(q == 0, low, np.where(q == 1, high, values))
    out = np.where(valid & (q >= 0) & (q <= 1), out, np.nan)
    return out[()]


def _undefined(*args):
    """nan in the shape of the arguments: the value where no parameter is in its range (no band: no variance known),
    given without loading scipy."""
    return np.full(np.broadcast(*args).shape, np.nan)[()]


class _StudentT:
    """Student's t with ``df`` degrees of freedom (``df`` = inf: the standard normal, as scipy.stats gives it)."""

    @staticmethod
    def ppf(q, df):
        valid = np.asarray(df) > 0
        if not np.any(valid):
            return _undefined(q, df)
        return _quantile(_special().stdtrit(df, q), q, -math.inf, math.inf, valid)

    @classmethod
    def isf(cls, q, df):
        return -cls.ppf(q, df)

    @staticmethod
    def cdf(x, df):
        if not np.any(np.asarray(df) > 0):
            return _undefined(x, df)
        return _special().stdtr(df, x)

    @classmethod
    def sf(cls, x, df):
        return cls.cdf(-np.asarray(x, dtype=float), df)


class _Normal:
    """The standard normal (``pdf`` also with a ``scale``)."""

    @staticmethod
    def ppf(q):
        return _special().ndtri(q)

    @staticmethod
    def isf(q):
        return -_special().ndtri(q)

    @staticmethod
    def cdf(x):
        return _special().ndtr(x)

    @staticmethod
    def sf(x):
        return _special().ndtr(-np.asarray(x, dtype=float))

    @staticmethod
    def pdf(x, scale=1.0):
        z = np.asarray(x, dtype=float) / scale
        return np.exp(-0.5 * z * z) / (math.sqrt(2.0 * math.pi) * scale)


class _FisherF:
    """Fisher's F with ``dfn`` and ``dfd`` degrees of freedom."""

    @staticmethod
    def ppf(q, dfn, dfd):
        valid = (np.asarray(dfn) > 0) & (np.asarray(dfd) > 0)
        if not np.any(valid):
            return _undefined(q, dfn, dfd)
        return _quantile(_special().fdtri(dfn, dfd, q), q, 0.0, math.inf, valid)


class _ChiSquared:
    """The chi-squared distribution with ``df`` degrees of freedom."""

    @staticmethod
    def ppf(q, df):
        df = np.asarray(df, dtype=float)
        if not np.any(df > 0):
            return _undefined(q, df)
        return _quantile(2.0 * _special().gammaincinv(df / 2.0, q), q, 0.0, math.inf, df > 0)


class _NoncentralT:
    """The noncentral t: only its survival function, for power planning. scipy computes it with a private function
    of its own, so this one asks scipy.stats (imported here, at a power calculation, never by a replayed sweep)."""

    @staticmethod
    def sf(x, df, nc):
        from scipy import stats

        return stats.nct.sf(x, df, nc)


t = _StudentT()
norm = _Normal()
f = _FisherF()
chi2 = _ChiSquared()
nct = _NoncentralT()
