"""The cache's lookup on the store (newest original ok run of these settings, never a debug run), and the rule a
policy hands the runner (``harness.session.cache.CacheRule``)."""

import json

from harness.store import RunRecord, write_record
from harness.session.cache import lookup_cached


def _record(run_id, timestamp, status="ok", fault="none", cached_from="", sweep_id="s1"):
    return RunRecord(run_id=run_id, status=status, timestamp=timestamp, config_hash="h1", env_key="e1",
                     sweep_id=sweep_id, cached_from=cached_from,
                     config_json=json.dumps({"debug": {"fault": fault, "slowdown_ms": 0}}), samples_per_s=1.0)


def test_the_newest_original_ok_run_is_taken_and_debug_runs_never_are(tmp_path):
    write_record(_record("r1", "2026-11-22T09:00:00+0000"), tmp_path)
    write_record(_record("r2", "2026-11-22T09:01:00+0000"), tmp_path)
    write_record(_record("r3", "2026-11-22T09:02:00+0000", fault="hang"), tmp_path)  # newer, but a debug run
    write_record(_record("r4", "2026-11-22T09:03:00+0000", cached_from="r2", sweep_id="s2"), tmp_path)  # a copy
    write_record(_record("r5", "2026-11-22T09:04:00+0000", status="error"), tmp_path)
    assert lookup_cached(str(tmp_path), "h1", "e1", set()).run_id == "r2"
    assert lookup_cached(str(tmp_path), "h1", "e1", {"r2"}).run_id == "r1"  # used by this sweep already
    assert lookup_cached(str(tmp_path), "h1", "e1", {"r1", "r2"}) is None  # only the debug run is left
    assert lookup_cached(str(tmp_path), "h1", "other-env", set()) is None


def test_the_rule_a_policy_hands_the_runner_asks_the_store_by_its_fields(tmp_path):
    from harness import config as config_mod
    from harness.session.cache import CacheRule
    from tests.conftest import tiny_config

    cfg = tiny_config(results_dir=str(tmp_path))
    mine = config_mod.config_hash(cfg)
    for run_id, stamp, sweep in (("a", "09:00", "s1"), ("b", "09:01", "s2"), ("c", "09:02", "s1")):
        write_record(RunRecord(run_id=run_id, status="ok", timestamp=f"2026-11-22T{stamp}:00+0000", config_hash=mine,
                               env_key="e1", sweep_id=sweep, config_json="{}", samples_per_s=1.0), tmp_path)
    rule = CacheRule(str(tmp_path))
    assert rule.original(cfg, "e1").run_id == "c" and rule.holds(cfg, "e1")  # the newest
    assert CacheRule(str(tmp_path), oldest=True).original(cfg, "e1").run_id == "a"  # a climb replays in order
    assert CacheRule(str(tmp_path), sweep="s2").original(cfg, "e1").run_id == "b"  # a round copied from one sweep
    assert CacheRule(str(tmp_path), frozenset({"b"}), sweep="s2").original(cfg, "e1") is None
    assert not CacheRule(str(tmp_path), frozenset({"b"}), sweep="s2").holds(cfg, "e1")
    assert rule.original(cfg, "other-env") is None and not rule.holds(cfg, "other-env")
    cfg.debug.fault = "hang"  # a debug run never copies (faults leave config_hash alone)
    assert config_mod.config_hash(cfg) == mine and rule.original(cfg, "e1") is None and not rule.holds(cfg, "e1")


def test_a_measurement_copied_whole_comes_from_the_oldest_sweep_that_holds_every_run_unused(tmp_path):
    from harness.session.cache import whole_source

    def put(run_id, hour, config_hash, sweep_id, cached_from=""):
        write_record(RunRecord(run_id=run_id, status="ok", timestamp=f"2026-11-22T{hour:02d}:00:00+0000",
                               config_hash=config_hash, env_key="e1", sweep_id=sweep_id, cached_from=cached_from,
                               config_json="{}", samples_per_s=1.0), tmp_path)

    for i, (config_hash, sweep) in enumerate([("inc", "day1"), ("inc", "day1"),  # the incumbent alone
                                              ("inc", "day2"), ("cand", "day2"), ("inc", "day2"), ("cand", "day2"),
                                              ("inc", "day3"), ("cand", "day3"), ("inc", "day3"), ("cand", "day3"),
                                              ("inc", ""), ("cand", ""), ("inc", ""), ("cand", "")]):  # no sweep
        put(f"r{i}", i, config_hash, sweep)
    put("copy", 20, "cand", "day1", cached_from="r3")  # a copy is not an original
    needed = {"inc": 2, "cand": 2}
    assert whole_source(str(tmp_path), needed, "e1", set()) == "day2"
    assert whole_source(str(tmp_path), needed, "e1", {"r3"}) == "day3"  # one of day2's used already
    assert whole_source(str(tmp_path), {"inc": 2, "cand": 2}, "e1", {"r3", "r9"}) is None
    assert whole_source(str(tmp_path), {"inc": 3, "cand": 1}, "e1", set()) is None
    assert whole_source(str(tmp_path), {"inc": 2}, "e1", set()) == "day1"
    assert whole_source(str(tmp_path), needed, "other-env", set()) is None
    assert whole_source(str(tmp_path / "none"), needed, "e1", set()) is None


def test_runs_of_one_second_are_taken_in_the_stores_order_and_a_run_without_a_time_last_either_way(tmp_path):
    from harness.session.cache import originals
    from harness.store import load_runs

    same = "2026-11-22T09:00:00+0000"  # records written within one second share their timestamp
    for run_id, stamp in (("b", same), ("a", same), ("n", ""), ("c", same), ("d", "2026-11-22T09:00:01+0000")):
        write_record(_record(run_id, stamp or None), tmp_path)
    frame = load_runs(tmp_path)
    for oldest in (False, True):
        order, used = [], set()
        while (found := lookup_cached(str(tmp_path), "h1", "e1", used, oldest)) is not None:
            order.append(found.run_id)
            used.add(found.run_id)
        assert order == list(originals(frame, "h1", "e1", set(), oldest)["run_id"])  # the frame's rule, in pyarrow
        assert order == (["a", "b", "c", "d", "n"] if oldest else ["d", "a", "b", "c", "n"])
