"""The few distribution functions the statistics call, with ``scipy.stats``'s names (``t.ppf``, ``norm.sf``, ...), on
``scipy.special``: the same functions scipy.stats computes them with, the same numbers.

Why not ``scipy.stats`` itself: importing it costs over a second on a small CPU (interpolation, spatial, sparse and
every distribution are loaded with it), which a sweep served from the store paid before it printed a line. Here
scipy is loaded at the first value asked for, not when a statistics module is imported: a command that computes no
band (a sweep replayed from the store with one round, a table without repeats) never loads scipy at all.

Use it as ``from harness.analysis.stats import distributions as sps``: ``sps.t.ppf(q, df)`` as before.
"""

from __future__ import annotations

import math

import numpy as np


def _special():
    """scipy.special, imported at the first value (see the module's docstring: kept off commands that need none)."""
    from scipy import special

    return special


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
