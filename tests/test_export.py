"""``python -m harness export``: a sweep's and a check's decided figures in TensorBoard, MLflow and W&B, read back
with each tracker's own reader. The stores are built here (records written as a sweep writes them, a check's
verdict kept as a check keeps it); no run is measured. A tracker's test is skipped when its library is missing."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest

from harness import cli
from harness.analysis.gate import paired, verdicts
from harness.analysis.gate.paired_formats import to_json
from harness.analysis.gate.thresholds import parse_thresholds
from harness.analysis.views import table as table_mod
from harness.export import figures
from harness.store import RunRecord, write_record

SWEEP = "phase2-20260101-000000"
SPEEDS = {0: [100.0, 102.0, 98.0], 1: [150.0, 153.0, 148.0]}  # samples/s by rung, one run a round
SETTINGS = {"batch_size": 4, "precision": "fp32", "data": {"num_workers": 2, "patch_size": [32, 32, 32]}}


def step_times(rung: int, rnd: int) -> list[float]:
    rng = np.random.default_rng(10 * rung + rnd)
    return list(20.0 / (1 + rung) + rng.gamma(2.0, 1.0, size=30))


def write_sweep(results: Path, sweep_id: str = SWEEP, campaign: str = "", day: int = 1) -> None:
    """Two rungs x three rounds, as a sweep stores them (settings, raw step times, commit, fingerprint)."""
    for rung, speeds in SPEEDS.items():
        settings = SETTINGS | ({"precision": "bf16-mixed"} if rung else {})
        for rnd, sps in enumerate(speeds):
            write_record(RunRecord(
                run_id=f"{sweep_id}-{rung}{rnd}", status="ok",
                timestamp=f"2026-01-{day:02d}T10:{rnd:02d}:{rung:02d}+0000", campaign_id=campaign,
                workload="unet3d", size="smoke", device="cpu", config_hash=f"cfg-{rung}", env_key="env-1",
                config_json=json.dumps(settings), sweep_id=sweep_id, ladder="phase2", rung=rung,
                change="precision=bf16-mixed" if rung else "", round=rnd, samples_per_step=4, samples_per_s=sps,
                units_per_s=sps * 32768, unit="voxels", mfu=0.01 * (1 + rung), data_wait_frac=0.05 / (1 + rung),
                step_ms=step_times(rung, rnd), step_ms_p50=float(np.median(step_times(rung, rnd))),
                peak_host_rss_bytes=2e9 + rung * 1e8, cpu_model="Sim CPU", cpu_count=2, other_cpu_pct=1.0,
                git_commit="abc1234def", code_fingerprint="fp-77"), results)


def write_check(results: Path) -> str:
    """A paired check's verdict of three configs (one regressed), kept as ``check --against`` keeps it."""
    rows = []
    for rung, ratios in {0: [0.80, 0.82, 0.79], 1: [1.0, 1.01, 0.99], 2: [0.93, 0.99, 0.90]}.items():
        for rnd, ratio in enumerate(ratios):
            for side, sps in (("ref", 100.0), ("work", 100.0 * ratio)):
                rows.append({"against_side": side, "rung": rung, "round": rnd, "status": "ok", "samples_per_s": sps,
                             "workload": "w", "ladder": "l", "change": f"c{rung}", "config_hash": f"h{rung}",
                             "error": "", "other_cpu_pct": 1.0})
    thresholds = parse_thresholds(None, 0.05, "--threshold")
    result = paired.PairedResult(rows=paired.analyse(pd.DataFrame(rows), thresholds), check_id="against-x1",
                                 sweep_id=SWEEP, ref="main", ref_commit="def4567" * 2, work_commit="abc1234" * 2,
                                 rounds=3, thresholds=thresholds)
    verdicts.save_verdict(results, result.check_id, to_json(result))
    return result.check_id


@pytest.fixture
def store(tmp_path) -> Path:
    results = tmp_path / "results"
    write_sweep(results)
    write_check(results)
    return results


def test_a_sweeps_figures_are_the_tables_with_the_step_times_percentiles(store):
    group = figures.sweep_group(str(store), "latest")
    table = table_mod.load_table(str(store), "latest")
    assert group.id == SWEEP and [e.step for e in group.entries] == [0, 1]
    rung1, row1 = group.entries[1], table.rows[1]
    assert rung1.metrics["throughput/samples_per_s"] == pytest.approx(150.0)
    assert rung1.metrics["throughput/samples_per_s_low"] == pytest.approx(150.0 * (1 - row1.uncertainty))
    assert rung1.metrics["speedup/x_baseline"] == pytest.approx(row1.x_baseline.value)
    assert rung1.metrics["speedup/x_baseline_high"] == pytest.approx(row1.x_baseline.high)
    pooled = [v for rnd in range(3) for v in step_times(1, rnd)]
    assert rung1.metrics["step_ms/p90"] == pytest.approx(np.percentile(pooled, 90))
    assert rung1.metrics["mfu"] == pytest.approx(0.02) and rung1.metrics["time/data_wait_share"] == pytest.approx(0.025)
    assert rung1.metrics["throughput/units_per_s"] == pytest.approx(150.0 * 32768)
    assert rung1.params["precision"] == "bf16-mixed" and rung1.params["data.num_workers"] == 2
    assert rung1.params["data.patch_size"] == "[32, 32, 32]"
    assert rung1.tags["verdict"] == (row1.verdict or "-") and rung1.tags["commit"] == "abc1234def"
    assert rung1.tags["fingerprint"] == "fp-77"


def test_a_run_on_a_busy_machine_is_left_out_of_the_figures_as_the_table_leaves_it_out(store):
    """A round measured while other work took the CPUs, and measured again: the table leaves the busy run out of
    its figures; the export pooled its slow steps into the step-time percentiles (a p90 of the other work) and
    counted it among the ok runs. Now a rung's figures come from the same runs as its row, and the busy run is
    counted as busy."""
    write_record(RunRecord(
        run_id=f"{SWEEP}-busy", status="ok", timestamp="2026-01-01T09:59:59+0000", workload="unet3d", size="smoke",
        device="cpu", config_hash="cfg-1", env_key="env-1",
        config_json=json.dumps(SETTINGS | {"precision": "bf16-mixed"}),
        sweep_id=SWEEP, ladder="phase2", rung=1, change="precision=bf16-mixed", round=0, samples_per_step=4,
        samples_per_s=20.0, units_per_s=20.0 * 32768, unit="voxels", mfu=0.5, data_wait_frac=0.5,
        step_ms=[400.0] * 30, step_ms_p50=400.0, peak_host_rss_bytes=2.1e9, cpu_model="Sim CPU", cpu_count=2,
        other_cpu_pct=60.0, git_commit="abc1234def", code_fingerprint="fp-77"), store)
    row = table_mod.load_table(str(store), "latest").rows[1]
    rung1 = figures.sweep_group(str(store), "latest").entries[1]
    assert row.busy == 1 and rung1.metrics["throughput/samples_per_s"] == pytest.approx(row.samples_per_s) == 150.0
    quiet = [v for rnd in range(3) for v in step_times(1, rnd)]
    for p in figures.PERCENTILES:
        assert rung1.metrics[f"step_ms/p{p}"] == pytest.approx(np.percentile(quiet, p)), p
    assert rung1.metrics["mfu"] == pytest.approx(0.02)
    assert rung1.metrics["throughput/units_per_s"] == pytest.approx(150.0 * 32768)
    assert (rung1.metrics["runs/ok"], rung1.metrics["runs/busy"], rung1.metrics["runs/all"]) == (3.0, 1.0, 4.0)


def test_a_checks_figures_are_its_rows_with_the_band(store):
    group = figures.check_group(str(store), "latest")
    assert group.kind == "check" and group.id == "against-x1"
    assert [e.tags["verdict"] for e in group.entries] == ["regressed", "unchanged", "undecided"]
    first = group.entries[0]
    assert first.metrics["check/ratio_high"] < 0.95
    assert first.metrics["throughput/base_samples_per_s"] == pytest.approx(100.0)
    with pytest.raises(ValueError, match="--check 'nope': no such check .* valid choices: latest, against-x1"):
        figures.check_group(str(store), "nope")


def test_a_campaign_is_each_of_its_sweeps_and_a_baseline_check_its_rows(tmp_path, capsys):
    from tests.test_regress import check, setup_check

    for day, sweep_id in ((2, "camp-a"), (3, "camp-b")):
        write_sweep(tmp_path / "camp", sweep_id, campaign="campaign-1", day=day)
    assert [g.id for g in figures.groups(str(tmp_path / "camp"), None, None, "latest")] == ["camp-a", "camp-b"]
    write_sweep(tmp_path / "camp", "lone", day=4)
    assert [g.id for g in figures.groups(str(tmp_path / "camp"), "all", None)] == ["camp-a", "camp-b", "lone"]
    setup_check(tmp_path / "base", {"cfg-a": 80.0})
    capsys.readouterr()  # what setting up printed
    assert check(tmp_path / "base", "--format", "json") == 1
    row = json.loads(capsys.readouterr().out)["rows"][0]
    group = figures.check_group(str(tmp_path / "base"), "latest")
    assert [g.id for g in figures.groups(str(tmp_path / "base"), None, "all")] == [group.id]
    assert group.params["kind"] == "baseline" and group.metrics["configs/regressed"] == 1.0
    (entry,) = group.entries
    assert entry.tags["verdict"] == "regressed" and entry.metrics["check/ratio"] == pytest.approx(row["ratio"])
    assert (entry.metrics["check/ratio_low"], entry.metrics["check/ratio_high"]) == (pytest.approx(row["ci_low"]),
                                                                                   pytest.approx(row["ci_high"]))
    assert entry.metrics["throughput/head_samples_per_s"] == pytest.approx(row["current_samples_per_s"])


def test_bad_targets_are_one_line_and_exit_2(store, capsys):
    assert cli.main(["export", "--to", "excel", "out", "--results", str(store)]) == 2
    assert "unknown --to 'excel'. Valid choices: mlflow, tb, wandb" in capsys.readouterr().err
    assert cli.main(["export", "--to", "mlflow", "mlruns", "--results", str(store)]) == 2
    err = capsys.readouterr().err
    assert "--to mlflow 'mlruns': a tracking URI is needed" in err and err.count("\n") == 1
    assert cli.main(["export", "--to", "tb", "x", "--results", str(store), "--sweep", "nope"]) == 2
    assert "nope" in capsys.readouterr().err


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}, events


def test_tensorboard_reads_back_every_value_of_the_sweep_and_the_check(store, tmp_path, capsys):
    pytest.importorskip("tensorboard", reason="the tensorboard package is not installed (pip install tensorboard)")
    from tensorboard.plugins.hparams import plugin_data_pb2

    dest = tmp_path / "tb"
    assert cli.main(["export", "--to", "tb", str(dest), "--results", str(store), "--sweep", "latest",
                     "--check", "latest"]) == 0
    assert f"sweep {SWEEP}: 2 run folder(s)" in capsys.readouterr().out
    for group in (figures.sweep_group(str(store)), figures.check_group(str(store))):
        folders = sorted(p.name for p in (dest / group.id).iterdir())
        assert folders == sorted([group.kind] + [e.slug for e in group.entries])
        for entry in group.entries:
            scalars, events = _scalars(dest / group.id / entry.slug)
            assert set(scalars) == set(entry.metrics)
            for name, value in entry.metrics.items():
                assert scalars[name] == [(entry.step, pytest.approx(value, rel=1e-6))], name
            start = plugin_data_pb2.HParamsPluginData.FromString(
                events.PluginTagToContent("hparams")["_hparams_/session_start_info"]).session_start_info
            for key, value in entry.params.items():
                got = start.hparams[key]
                assert (got.number_value == pytest.approx(value) if isinstance(value, (int, float))
                        and not isinstance(value, bool) else got.bool_value == value if isinstance(value, bool)
                        else got.string_value == value), key
            assert start.hparams["tag/verdict"].string_value == entry.tags["verdict"]
    assert len(list((dest / SWEEP).rglob("events.out.tfevents.*"))) == 3  # one file a folder: no folder per call
    assert cli.main(["export", "--to", "tb", str(dest), "--results", str(store)]) == 0
    assert "already in" in capsys.readouterr().out  # exported again: left as it is, no second point
    assert len(list((dest / SWEEP).rglob("events.out.tfevents.*"))) == 3


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path):
    """A real ``mlflow server`` on sqlite in a temporary folder, on a free port; killed (its group) at the end."""
    pytest.importorskip("mlflow", reason="the mlflow package is not installed (pip install mlflow)")
    port = _free_port()
    log = open(tmp_path / "mlflow.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
         "--default-artifact-root", str(tmp_path / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.5)
        assert server.poll() is None, (tmp_path / "mlflow.log").read_text()[-2000:]
        yield uri
    finally:  # the server, its uvicorn worker and its job consumers: one process group, none left behind
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        server.wait()
        log.close()
        left = [p for p in psutil.process_iter() if _group(p) == server.pid]
        _, alive = psutil.wait_procs(left, timeout=10)
        assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], alive


def _group(process) -> int | None:
    try:
        return os.getpgid(process.pid)
    except (ProcessLookupError, psutil.Error):
        return None


def _read_runs(client, experiment_id: str, parent_id: str):
    from mlflow.entities import ViewType

    children = client.search_runs([experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}'",
                                  run_view_type=ViewType.ALL, max_results=1000)
    return {r.info.run_name: r for r in children}


@pytest.mark.slow
def test_mlflow_server_holds_a_parent_run_per_sweep_and_check_and_a_nested_run_per_rung(store, mlflow_server,
                                                                                         capsys):
    from mlflow import MlflowClient

    assert cli.main(["export", "--to", "mlflow", mlflow_server, "--results", str(store), "--sweep", "latest",
                     "--check", "latest", "--experiment", "perf"]) == 0
    out = capsys.readouterr().out
    assert f"sweep {SWEEP}: run " in out and "check against-x1: run " in out
    client = MlflowClient(tracking_uri=mlflow_server)
    experiment = client.get_experiment_by_name("perf")
    for group in (figures.sweep_group(str(store)), figures.check_group(str(store))):
        parents = client.search_runs([experiment.experiment_id], filter_string=f"tags.`harness.id` = '{group.id}'")
        assert len(parents) == 1
        parent = parents[0]
        assert parent.info.status == "FINISHED" and parent.data.tags["harness.kind"] == group.kind
        assert parent.data.params == {k: str(v) for k, v in group.params.items()}
        assert parent.data.metrics == pytest.approx(group.metrics)
        children = _read_runs(client, experiment.experiment_id, parent.info.run_id)
        assert sorted(children) == sorted(e.name for e in group.entries)
        for entry in group.entries:
            run = children[entry.name]
            assert run.data.params == {k: str(v) for k, v in entry.params.items()}
            assert run.data.metrics == pytest.approx(entry.metrics)
            assert run.data.tags["harness.verdict"] == entry.tags["verdict"]
            assert run.data.tags["harness.parent"] == group.id
    sweep_children = _read_runs(client, experiment.experiment_id, client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`harness.id` = '{SWEEP}'")[0].info.run_id)
    assert sweep_children["rung 1 precision=bf16-mixed"].data.tags["harness.commit"] == "abc1234def"
    assert sweep_children["rung 1 precision=bf16-mixed"].data.tags["harness.fingerprint"] == "fp-77"
    assert cli.main(["export", "--to", "mlflow", mlflow_server, "--results", str(store), "--experiment", "perf"]) == 0
    assert "already in experiment 'perf'" in capsys.readouterr().out
    assert len(client.search_runs([experiment.experiment_id], max_results=1000)) == 2 + 2 + 3


@pytest.mark.slow
def test_wandb_offline_runs_hold_the_settings_figures_and_verdicts(store, tmp_path, capsys, monkeypatch):
    """wandb 0.31 ships no Python reader of its run files (its Go core writes them): the test reads each offline
    run's log as bytes and finds its name, every metric's key, the settings and the verdict in it."""
    pytest.importorskip("wandb", reason="the wandb package is not installed (pip install wandb)")
    monkeypatch.setenv("WANDB_MODE", "offline")
    dest = tmp_path / "wb"
    assert cli.main(["export", "--to", "wandb", str(dest), "--results", str(store)]) == 0
    out = capsys.readouterr().out
    group = figures.sweep_group(str(store))
    files = sorted(dest.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1 + len(group.entries)
    assert all(f"wandb sync {path.parent}" in out or f" {path.parent}" in out for path in files)
    logs = {path: path.read_bytes() for path in files}
    for entry in group.entries:
        name = f"{group.id} {entry.name}".encode()
        log = next(data for data in logs.values() if name in data)
        for key in entry.metrics:
            assert key.encode() in log, key
        assert b"bf16-mixed" in log if entry.step == 1 else b"fp32" in log
        assert entry.tags["verdict"].encode() in log


def test_a_check_exports_itself_when_it_ends_and_a_failed_export_only_warns(tmp_path, capsys):
    """``check --export TARGET:DEST``: the check's exit code and report are the check's; the export's lines go to
    stderr, and an export that fails is a warning with the command that exports it again."""
    pytest.importorskip("tensorboard", reason="the tensorboard package is not installed (pip install tensorboard)")
    from tests.test_regress import check, setup_check

    setup_check(tmp_path, {"cfg-a": 80.0})
    capsys.readouterr()
    assert check(tmp_path, "--format", "json", "--export", f"tb:{tmp_path / 'tb'}") == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["exit_code"] == 1  # stdout holds the report alone
    check_id = figures.check_document(str(tmp_path))[0]
    assert f"export: check {check_id}: 1 run folder(s)" in captured.err
    assert len(list((tmp_path / "tb" / check_id).rglob("events.out.tfevents.*"))) == 2
    (tmp_path / "a-file").write_text("")
    assert check(tmp_path, "--export", f"tb:{tmp_path / 'a-file' / 'tb'}") == 1
    err = capsys.readouterr().err
    assert "warning: not exported to tb:" in err and "python -m harness export --to tb " in err
    assert check(tmp_path, "--export", "excel:out") == 2
    assert "--export='excel:out': TARGET:DEST with TARGET one of tb, mlflow, wandb" in capsys.readouterr().err


def test_a_sweep_export_setting_is_checked_before_anything_runs():
    from harness.commands import sweep as sweep_cmd

    with pytest.raises(ValueError, match="sweep.export='excel:x': TARGET:DEST with TARGET one of tb, mlflow, wandb"):
        sweep_cmd.plan_sweep(["+ladder=phase2", "sweep.export=excel:x"])
    assert sweep_cmd.plan_sweep(["+ladder=phase2", "sweep.export=tb:runs/harness"]).export == "tb:runs/harness"


class FakeWandb:
    """What the W&B exporter calls of ``wandb``, writing one folder per run as offline runs do."""

    def __init__(self):
        self.runs = []

    def init(self, dir, name, **kwargs):
        self.runs.append(name)
        run_dir = Path(dir) / "wandb" / f"offline-run-{len(self.runs)}" / "files"
        run_dir.mkdir(parents=True)
        summary = type("Summary", (), {"update": lambda self, values: None})()
        return type("Run", (), {"dir": str(run_dir), "summary": summary, "finish": lambda self: None})()

    def teardown(self):
        pass


def test_a_wandb_export_run_again_is_left_as_it_is_as_the_docs_say(store, tmp_path, capsys, monkeypatch):
    """The same export twice wrote every offline run twice (a `wandb sync` uploaded both); as with TensorBoard and
    MLflow, a sweep already exported under DEST is now said and left alone, and a new one is still exported."""
    from harness.export import to_wandb

    fake = FakeWandb()
    monkeypatch.setattr(to_wandb, "wandb_module", lambda: fake)
    dest = tmp_path / "wb"
    group = figures.sweep_group(str(store))
    assert cli.main(["export", "--to", "wandb", str(dest), "--results", str(store)]) == 0
    assert len(fake.runs) == 1 + len(group.entries) and "wandb sync" in capsys.readouterr().out
    assert cli.main(["export", "--to", "wandb", str(dest), "--results", str(store)]) == 0
    assert len(fake.runs) == 1 + len(group.entries)
    assert capsys.readouterr().out.strip() == (f"sweep {SWEEP}: already in {dest / 'wandb'}, left as it is "
                                               f"(delete {dest / 'harness-exported' / SWEEP} to export again)")
    assert len(list(dest.glob("wandb/offline-run-*"))) == 1 + len(group.entries)


def fake_mlflow(monkeypatch, down: bool = False) -> list[str]:
    """What the MLflow exporter imports of ``mlflow``: a client that keeps the names of the runs it made (the list
    returned), or, ``down``, one whose server does not answer, raising MLflow's error as its REST client does."""
    import types

    runs: list[str] = []

    class MlflowException(Exception):
        pass

    class Client:
        def __init__(self, tracking_uri):
            self.uri = tracking_uri

        def get_experiment_by_name(self, name):
            if down:
                raise MlflowException(f"API request to {self.uri}/api/2.0/mlflow/experiments/get-by-name failed "
                                      "with exception Connection refused\nsecond line")
            return None

        def create_experiment(self, name):
            return "1"

        def search_runs(self, experiment_ids, filter_string, max_results):
            return []

        def create_run(self, experiment_id, run_name, tags):
            runs.append(run_name)
            return types.SimpleNamespace(info=types.SimpleNamespace(run_id=f"r{len(runs)}"))

        def log_batch(self, run_id, metrics, params):
            pass

        def set_terminated(self, run_id):
            pass

    for name, module in {"mlflow": types.SimpleNamespace(MlflowClient=Client),
                         "mlflow.entities": types.SimpleNamespace(Metric=lambda *a: a, Param=lambda *a: a),
                         "mlflow.exceptions": types.SimpleNamespace(MlflowException=MlflowException)}.items():
        monkeypatch.setitem(sys.modules, name, module)
    return runs


def test_an_mlflow_server_that_does_not_answer_is_one_line_and_a_database_uri_gets_no_page(store, capsys,
                                                                                          monkeypatch):
    """A server down was MLflow's traceback and exit 1; now it is one line naming the URI, exit 2. A database URI
    (sqlite:///, or NAME+DRIVER as MLflow's docs write them) is taken, and no UI address is made of it."""
    runs = fake_mlflow(monkeypatch)
    assert cli.main(["export", "--to", "mlflow", "sqlite:///m.db", "--results", str(store)]) == 0
    out = capsys.readouterr().out
    assert f"sweep {SWEEP}: run r1 with 2 nested run(s) in experiment 'harness' of sqlite:///m.db" in out
    assert "#" not in out and len(runs) == 3
    assert cli.main(["export", "--to", "mlflow", "http://h:5000/", "--results", str(store)]) == 0
    assert "in experiment 'harness': http://h:5000/#/experiments/1/runs/r4" in capsys.readouterr().out
    for uri in ("mysql+pymysql://u@h/db", "postgresql+psycopg2://u@h/db", "https://mlflow.example.com"):
        assert cli.main(["export", "--to", "mlflow", uri, "--results", str(store)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert cli.main(["export", "--to", "mlflow", "file:///tmp/mlruns", "--results", str(store)]) == 2
    assert "valid schemes: http, https, sqlite, postgresql, mysql, mssql" in capsys.readouterr().err
    fake_mlflow(monkeypatch, down=True)
    assert cli.main(["export", "--to", "mlflow", "http://127.0.0.1:9", "--results", str(store)]) == 2
    err = capsys.readouterr().err
    assert err == ("error: --to mlflow 'http://127.0.0.1:9': API request to http://127.0.0.1:9/api/2.0/mlflow/"
                   "experiments/get-by-name failed with exception Connection refused\n")


@pytest.mark.slow
def test_mlflow_itself_down_or_a_database(store, tmp_path, capsys, monkeypatch):
    """The same with MLflow's own client: a port nobody listens on, then a sqlite database read back."""
    pytest.importorskip("mlflow", reason="the mlflow package is not installed (pip install mlflow)")
    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    uri = f"http://127.0.0.1:{_free_port()}"
    assert cli.main(["export", "--to", "mlflow", uri, "--results", str(store)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --to mlflow {uri!r}: API request to {uri}") and err.count("\n") == 1
    database = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert cli.main(["export", "--to", "mlflow", database, "--results", str(store)]) == 0
    assert f"nested run(s) in experiment 'harness' of {database}" in capsys.readouterr().out
    client = MlflowClient(tracking_uri=database)
    assert len(client.search_runs([client.get_experiment_by_name("harness").experiment_id])) == 1 + 2


def test_an_export_of_all_of_an_empty_store_says_there_is_nothing(tmp_path, capsys):
    """`--sweep all --check all` of a store without sweeps or checks (a nightly job's first night) printed nothing
    and exited 0: now it says so."""
    (tmp_path / "results").mkdir()
    args = ["export", "--to", "tb", str(tmp_path / "tb"), "--results", str(tmp_path / "results")]
    assert cli.main(args + ["--sweep", "all", "--check", "all"]) == 0
    assert capsys.readouterr().out == (f"nothing to export: the store in {tmp_path / 'results'} holds no sweep or "
                                       "kept check verdict that --sweep all --check all names\n")
    assert not (tmp_path / "tb").exists()


def test_the_wandb_extra_asks_for_a_wandb_that_takes_what_the_exporter_passes():
    """The exporter makes one offline run after another in one process with ``wandb.init(reinit="create_new")``,
    which wandb has taken since 0.19.10; the extra asked for ``wandb>=0.19``, so an older one passed it and failed
    at the first run."""
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    (wandb,) = [Requirement(r) for r in project["optional-dependencies"]["wandb"]]
    assert "0.19.9" not in wandb.specifier and "0.19.10" in wandb.specifier


def test_a_tensorboard_export_stopped_part_way_leaves_no_folder_taken_for_a_whole_one(store, tmp_path, capsys,
                                                                                        monkeypatch):
    """A group's folder with event files is a whole export (run again, it is left alone), so an export stopped
    part-way must not leave one: it writes beside it and renames once every run folder is there."""
    from harness.export import to_tb

    written: list[Path] = []

    def fake_entry(writer_cls, folder: Path, entry) -> None:  # TensorBoard's files, without the package
        if len(written) == 2 and stop:
            raise KeyboardInterrupt  # stopped after two run folders
        folder.mkdir(parents=True)
        (folder / "events.out.tfevents.1.host").write_bytes(b"x")
        written.append(folder)

    monkeypatch.setattr(to_tb, "writer_class", lambda: object)
    monkeypatch.setattr(to_tb, "write_entry", fake_entry)
    dest, sweep_id = tmp_path / "tb", figures.sweep_group(str(store)).id
    stop = True
    with pytest.raises(KeyboardInterrupt):
        to_tb.export([figures.sweep_group(str(store))], str(dest))
    assert not (dest / sweep_id).exists() and (dest / f".{sweep_id}.partial").is_dir()
    stop = False
    assert cli.main(["export", "--to", "tb", str(dest), "--results", str(store)]) == 0
    entries = sorted(p.name for p in (dest / sweep_id).iterdir())
    assert len(entries) == 1 + len(figures.sweep_group(str(store)).entries)
    assert not (dest / f".{sweep_id}.partial").exists()
    assert "run folder(s)" in capsys.readouterr().out
    assert cli.main(["export", "--to", "tb", str(dest), "--results", str(store)]) == 0
    assert "left as it is" in capsys.readouterr().out
    (tmp_path / "file").write_text("")
    assert cli.main(["export", "--to", "tb", str(tmp_path / "file" / "tb"), "--results", str(store)]) == 2
    assert capsys.readouterr().err.startswith(f"error: --to tb {str(tmp_path / 'file' / 'tb')!r}: cannot write")
