"""The cache as a rule the runner asks the store: which earlier measurement a turn may copy instead of measuring.

A turn may copy an original ``ok`` run of the same resolved settings (``config_hash``) in the same environment
(``env_key``), one its session has not used yet (no run counts twice), never a debug run's (faults and slowdowns leave
``config_hash`` alone) and never for a turn that is itself a debug run; a turn that profiles copies only a record
that kept its profile (the profile is not part of ``config_hash``). What is left to a policy is a field of the rule:
from which sweep (a sweep's round copies whole from ONE earlier sweep, ``harness.sweeps.rungs.round_source``), and
whether the newest or the oldest original comes first (a climb run again replays its runs in the order they were
made). A policy that must not copy (``sweep.rerun=true``) hands the runner no rule.

The store is read by the rule alone, filtered inside pyarrow: the few short columns below of the rows with these
settings, then the one record a turn copies.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from harness import config as config_mod
from harness.profiles import summary_from_json
from harness.store import RunRecord, load_records, load_runs, read_table, records_from_frame

# What the cache matches on: short columns only. config_json (~1.5 KB a run) is read for the candidates alone.
CACHE_COLUMNS = ("run_id", "sweep_id", "timestamp", "config_hash", "env_key", "status", "cached_from")


@dataclass(frozen=True)
class CacheRule:
    """What a policy lets its turns copy from the store under ``results_dir``: originals not in ``used``, from the
    sweep ``sweep`` alone ("": any), the ``oldest`` first (else the newest); ``match_profile``: a turn that profiles
    copies only a record that kept its profile."""

    results_dir: str
    used: frozenset[str] = frozenset()
    sweep: str = ""
    oldest: bool = False
    match_profile: bool = True

    def original(self, cfg: config_mod.RunConfig, env_key: str) -> RunRecord | None:
        """The stored measurement ``cfg`` (resolved) may copy in the environment ``env_key``; None: measure it."""
        if debug_active(cfg):
            return None
        return lookup_cached(self.results_dir, config_mod.config_hash(cfg), env_key, set(self.used), self.oldest,
                             self.match_profile and cfg.profile.enabled, self.sweep)

    def holds(self, cfg: config_mod.RunConfig, env_key: str) -> bool:
        """Whether the store holds an original ``cfg`` may copy, from its short columns alone (a round's estimate asks
        it of every rung; a debug run among the originals, which :meth:`original` would pass over, is not looked
        for here)."""
        if debug_active(cfg):
            return False
        config_hash = config_mod.config_hash(cfg)
        try:
            keys = load_runs(self.results_dir, columns=CACHE_COLUMNS,
                             where={"config_hash": config_hash, "env_key": env_key, "status": "ok"})
        except ValueError:  # no results folder yet
            return False
        hits = originals(keys, config_hash, env_key, set(self.used))
        return len(hits[hits["sweep_id"] == self.sweep] if self.sweep else hits) > 0


def whole_source(results_dir: str, needed: Mapping[str, int], env_key: str, used) -> str | None:
    """The sweep holding, for every settings hash in ``needed``, that many ``ok`` originals in ``env_key`` not in
    ``used`` (of several, the one whose first such run is oldest), or None: a measurement whose runs must all come
    from one session (a climb's comparison) is copied whole from it or measured whole."""
    try:
        keys = load_runs(results_dir, columns=CACHE_COLUMNS,
                         where={"config_hash": sorted(needed), "env_key": env_key, "status": "ok"})
    except ValueError:  # no results folder yet
        return None
    hits = keys[(keys["cached_from"].fillna("") == "") & (keys["sweep_id"].fillna("") != "")
                & ~keys["run_id"].isin(set(used))]
    counts = hits.groupby(["sweep_id", "config_hash"]).size().to_dict()
    for sweep in hits.groupby("sweep_id")["timestamp"].min().sort_values(kind="stable").index:
        if all(counts.get((sweep, h), 0) >= n for h, n in needed.items()):
            return str(sweep)
    return None


def debug_active(cfg: config_mod.RunConfig) -> bool:
    """Debug settings (faults, slowdowns) leave config_hash alone, so such runs never use or feed the cache."""
    return cfg.debug.fault != "none" or cfg.debug.slowdown_ms > 0


def _debug_in_json(config_json: str) -> bool:
    debug = json.loads(config_json or "{}").get("debug", {})
    return debug.get("fault", "none") != "none" or float(debug.get("slowdown_ms", 0) or 0) > 0


def originals(frame, config_hash: str, env_key: str, used: set[str], oldest: bool = False):
    """Rows of original ``ok`` runs of these settings not yet used by this sweep, newest (or oldest) first."""
    hits = frame[(frame["config_hash"] == config_hash) & (frame["env_key"] == env_key) & (frame["status"] == "ok")
                 & (frame["cached_from"].fillna("") == "") & (~frame["run_id"].isin(used))]
    return hits.sort_values("timestamp", ascending=oldest, kind="stable")  # ties (one second) keep the store's order


def find_cached(frame, config_hash: str, env_key: str, used: set[str]) -> RunRecord | None:
    """The newest original ``ok`` measurement of these settings in ``frame``, not yet used by this sweep."""
    hits = originals(frame, config_hash, env_key, used)
    if not hits.empty:  # an empty mask of object dtype would select columns, not rows
        hits = hits[~hits["config_json"].map(_debug_in_json).astype(bool)].head(1)
    return records_from_frame(hits)[0] if len(hits) else None


def lookup_cached(results_dir: str, config_hash: str, env_key: str, used: set[str],
                  oldest: bool = False, profiled: bool = False, sweep: str = "") -> RunRecord | None:
    """:func:`find_cached` on the store, reading only what it matches on: the few short columns above of the rows
    with these settings (filtered inside pyarrow), then the candidates' records, newest first, until one is not a
    debug run (nearly always the first). ``oldest``: oldest first instead, so that a process replaying a sequence
    of measurements (``climb``) meets them in the order they were made. ``profiled``: only a record that kept a
    profile (a sweep with ``profile.enabled``; the profile is not part of config_hash). ``sweep``: only from that
    sweep (a round copied whole from one)."""
    for sweep_id, run_id in _candidates(results_dir, config_hash, env_key, used, oldest, sweep):
        # by sweep_id too: compacted parts are sorted by sweep, so only its row groups are read, not every one
        found = load_records(results_dir, where={"sweep_id": str(sweep_id), "run_id": str(run_id)})
        if found and not _debug_in_json(found[0].config_json) and (not profiled or _has_profile(found[0])):
            return found[0]
    return None


def _candidates(results_dir: str, config_hash: str, env_key: str, used: set[str], oldest: bool,
                sweep: str) -> list[tuple[str, str]]:
    """(sweep_id, run_id) of :func:`originals` in the store (of ``sweep`` alone when given), in its order, filtered
    and sorted inside pyarrow: a cached sweep asks once a rung, and the frame's filters cost ~5 ms a call."""
    where = {"config_hash": config_hash, "env_key": env_key, "status": "ok", **({"sweep_id": sweep} if sweep else {})}
    keys = read_table(results_dir, columns=["sweep_id", "run_id", "timestamp", "cached_from"], where=where)
    original = pc.equal(pc.fill_null(keys["cached_from"], ""), "")
    unused = pc.invert(pc.is_in(keys["run_id"], value_set=pa.array(sorted(used), pa.string())))
    keys = keys.filter(pc.and_(original, unused))
    # stable, missing timestamps last either way (pyarrow's default): what the frame's sort_values(kind="stable") gave
    order = pc.sort_indices(keys, sort_keys=[("timestamp", "ascending" if oldest else "descending")])
    keys = keys.take(order)
    return list(zip(keys["sweep_id"].to_pylist(), keys["run_id"].to_pylist()))


def _has_profile(record: RunRecord) -> bool:
    """A profile that was taken (not one that failed, nor a record from before profiles)."""
    try:
        summary = summary_from_json(getattr(record, "profile_json", ""))
    except ValueError:
        return False
    return summary is not None and not summary.error
