"""The sweep cache's lookup on the store: newest original ok run of these settings, never a debug run."""

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
