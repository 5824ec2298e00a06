"""Language-model training: the GPT workload built from its settings, its FLOPs counted two ways and matched by hand,
MFU over the device table's peak, the lm ladder's claims and sources, the lm knobs' skip reasons, and the tokens
table's compile break-even."""


import pytest
import torch
import yaml

from harness.analysis.views.units import UnitRow, break_even_lines
from harness.config import ladder as ladder_mod
from harness.run.child.summary import Extras, Measurement, per_sample, summarize
from harness.workload import train_flops
from harness.workload.applicability import not_applicable
from harness_models.gpt import gpt, lm_step, recompute_flops_per_token, train_flops_per_token
from tests.conftest import REPO, tiny_config

LADDER = REPO / "harness" / "conf" / "ladder" / "lm.yaml"


def gpt_config(**overrides):
    return tiny_config(workload="gpt", **overrides)


def test_gpt_smoke_is_small_and_starts_near_ln_vocab():
    cfg = gpt_config()
    assert cfg.data.patch_size == [128] and cfg.workload.units_in((128,)) == 128  # tokens, not voxels
    model = gpt(context=cfg.data.patch_size, size=cfg.size)
    assert (model.layers, model.heads, model.width, model.vocab, model.context) == (2, 4, 128, 2048, 128)
    ids = torch.randint(0, 2048, (2, 128), generator=torch.Generator().manual_seed(0))
    loss = lm_step(model, {"input_ids": ids, "labels": ids})
    assert abs(float(loss.detach()) - torch.log(torch.tensor(2048.0)).item()) < 0.2  # GPT-2's init: ~ln(vocab) at first


def test_model_and_hardware_flops_match_the_hand_count():
    """6N + 12LdT a token (MLPerf's rule), and full checkpointing's recompute: each block's forward again less its
    last matmul (torch's non-reentrant checkpoint stops early), counted on the meta device by the harness."""
    cfg = gpt_config(activation_checkpointing=True)
    model = gpt(context=cfg.data.patch_size, size=cfg.size)
    n, length, layers, width = model.params_for_flops(), 128, 2, 128
    assert n == 2 * 12 * width ** 2 + 2048 * width  # qkv 3d^2, proj d^2, mlp 8d^2 per block; the tied head
    by_hand = train_flops_per_token(n, layers, width, length) * length
    assert by_hand == (6 * n + 12 * layers * width * length) * length
    model_flops = train_flops.model_flops(cfg, cfg.workload)
    assert model_flops == by_hand
    last = layers * 4 * width * width  # each block's MLP output projection
    recompute = recompute_flops_per_token(model.block_params(), last, layers, width, length) * length
    assert train_flops.hardware_flops(cfg, cfg.workload, model_flops) == by_hand + recompute
    plain = gpt_config()
    assert train_flops.hardware_flops(plain, plain.workload, model_flops) == model_flops  # nothing recomputed
    selective = gpt_config(activation_checkpointing=True, lm__checkpoint_policy="selective")
    between = train_flops.hardware_flops(selective, selective.workload, model_flops)
    assert model_flops < between < by_hand + recompute  # half the matmuls kept, attention kept


def test_mfu_is_both_flops_over_the_dtype_peak_of_the_device_table():
    cfg = gpt_config(activation_checkpointing=True, precision="bf16-mixed")
    cfg.device = "cuda"
    sample = per_sample(cfg, 5.0e8, "NVIDIA H100 80GB HBM3", hardware_flops=6.0e8)
    assert sample.peak_flops == 989.4e12 and sample.units == 128  # bf16 dense, not an A100's 312 TFLOP/s
    m = Measurement(samples_per_step=4, warmup_ms=[100.0], step_ms=[10.0] * 10, data_wait_ms=[0.0] * 10,
                    measured_s=0.1)
    s = summarize(m, Extras(), sample, compiled=False)
    assert s.samples_per_s == pytest.approx(400.0) and s.units_per_s == pytest.approx(400.0 * 128)
    assert s.mfu == pytest.approx(5.0e8 * 400 / 989.4e12)
    assert s.mfu_hardware == pytest.approx(6.0e8 * 400 / 989.4e12)
    cpu = per_sample(gpt_config(), 5.0e8, "")
    assert cpu.peak_flops is None  # a CPU: MFU n/a, never a default peak


def test_every_lm_rung_quotes_a_claim_and_its_source_is_in_the_ladder_file():
    ladder = ladder_mod.load("lm")
    text = " ".join(LADDER.read_text().split())
    raw = yaml.safe_load(LADDER.read_text())
    assert len(ladder.rungs) == len(raw["rungs"]) + 1  # the baseline and one rung a knob
    for entry in raw["rungs"]:
        assert entry["source"].strip(), entry
        assert " ".join(entry["source"].split())[:60] in text
        claim = entry["claim"]
        assert claim == "minor" or (isinstance(claim, list) and 1 <= claim[0] <= claim[1])
    figures = {tuple(e["set"]): e["claim"] for e in raw["rungs"] if e["claim"] != "minor"}
    assert figures == {("optimizer.fused",): [1.016, 1.036], ("compile",): [1.16, 1.16], ("lm.float8",): [1.25, 1.28]}
    for words in ("torchtitan", "8 H100s", "1.6-3.6%", "1.16x", "1.28x", "FlashAttention", "Korthikanti"):
        assert words in text


@pytest.mark.parametrize("setting, words", [
    ({"lm__sdpa_backend": "efficient"}, "no CPU kernel"),
    ({"lm__sdpa_backend": "cudnn"}, "no CPU kernel"),
    ({"lm__float8": True}, "needs a CUDA GPU with float8"),
    ({"lm__fsdp": True}, "needs devices >= 2"),
    ({"lm__checkpoint_policy": "selective"}, "activation_checkpointing=false checkpoints nothing"),
])
def test_lm_knobs_that_cannot_act_on_this_cpu_say_why(setting, words):
    assert words in not_applicable(gpt_config(**setting))


def test_lm_knobs_that_act_on_a_cpu_are_not_skipped():
    for setting in ({"lm__sdpa_backend": "math"}, {"lm__sdpa_backend": "flash"}, {"optimizer__fused": True},
                    {"activation_checkpointing": True, "lm__checkpoint_policy": "selective"}):
        assert not_applicable(gpt_config(**setting)) == ""
    assert "a language model on token batches" in not_applicable(tiny_config(lm__sdpa_backend="math"))


def test_break_even_is_compile_time_over_the_step_time_saved():
    rows = [UnitRow(0, "(baseline)", "ok", step_ms=50.0), UnitRow(1, "compile=default", "ok", step_ms=40.0,
                                                                   compile_s=20.0, cache="warm"),
            UnitRow(2, "compile_cache=fresh", "ok", step_ms=40.0, compile_s=60.0, cache="cold"),
            UnitRow(3, "compile=max-autotune", "ok", step_ms=55.0, compile_s=5.0, cache="warm"),
            UnitRow(4, "batch_size=8", "ok", step_ms=30.0, compile_s=5.0, cache="warm")]
    lines = break_even_lines(rows)
    assert "breaks even after 2000 steps" in lines[0] and "warm" in lines[0]
    assert "breaks even after 6000 steps" in lines[1] and "cold" in lines[1]
    assert "never pays back" in lines[2] and len(lines) == 3  # rung 4 changes the batch, not compile


def test_sequence_units_and_a_bad_units_word():
    from harness.config.validate import validate_workload

    spec = gpt_config().workload
    assert spec.units_per_sample == "sequence" and spec.units_in((300,)) == 300
    spec.units_per_sample = "words"
    with pytest.raises(ValueError, match="positive whole number, spatial .* or sequence"):
        validate_workload(spec)


def test_sdpa_backend_choices_are_named():
    with pytest.raises(ValueError, match="lm.sdpa_backend"):
        gpt_config(lm__sdpa_backend="flash2")


class FakeSequenceAllocator:
    """Stands in for ``runner.store_asked``: a run over ``fits`` tokens a sequence ends ``oom``."""

    def __init__(self, fits: int):
        self.fits, self.calls = fits, []

    def __call__(self, cfg, env, env_key, on_progress=None, skip_reason=None, pipeline=None, **fields):
        from harness.records.make import make_record
        from harness.store import store_record

        length = cfg.data.patch_size[-1]
        self.calls.append((length, fields.get("ladder")))
        status = "oom" if length > self.fits else "ok"
        record = make_record(cfg, env, env_key, status, "CUDA out of memory" if status == "oom" else "", **fields)
        if status == "ok":
            record.samples_per_s = 4000.0 / length * (1 + 0.002 * (len(self.calls) % 3))
            record.step_ms = [1000.0 * cfg.batch_size / record.samples_per_s] * 10
            record.peak_host_rss_bytes = (100 + length) * 2 ** 20
            record.other_cpu_pct, record.cpu_count, record.cpu_model = 1.0, 2, "cpu"
        store_record(record, cfg.results_dir)
        return record


def test_fit_on_the_sequence_axis_finds_the_longest_sequence_that_fits(results, monkeypatch, capsys):
    import contextlib

    from harness import config as config_mod
    from harness.fit import session
    from harness.fit.search import FitConfig
    from harness.sweeps import loop
    from harness.sweeps.rungs import runner
    from tests.test_fit import Display, Lines, _progress

    fake = FakeSequenceAllocator(fits=400)  # 384 tokens fit, 448 do not
    monkeypatch.setattr(runner, "store_asked", fake)
    monkeypatch.setattr(loop.launcher, "warm", lambda: contextlib.nullcontext(
        type("Session", (), {"begin": lambda self, cfg: None})()))
    settings = config_mod.to_dict(config_mod.from_dict({"workload": "gpt", "measure.steps": 2,
                                                        "measure.warmup_steps": 1, "results_dir": str(results),
                                                        "sweep.repeats": 2, "sweep.remeasure_busy": False}))
    lines = Lines()
    assert session.run_fit(settings, FitConfig(axis="sequence", max=1024), Display(say=lines.say, progress=_progress),
                           lines, []) == 0
    searched = [length for length, ladder in fake.calls if ladder == "fit"]
    assert searched == [64, 128, 256, 512, 384, 448]  # steps of 64 tokens: doubling, then bisecting 256..512
    out = capsys.readouterr().out
    assert "tokens/s" in out
    assert ("Largest that fits: data.patch_size=[384] (data.patch_size=[384] fits and data.patch_size=[448] runs "
            "out of memory).") in out


def test_the_sequence_axis_is_refused_for_a_workload_of_no_tokens():
    from harness.fit.axes import sequence_axis

    with pytest.raises(ValueError, match="fit.axis=sequence needs a language model on token batches"):
        sequence_axis("unet3d", [32, 32, 32], "volumes")


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["gpt", "gpt2", "llama"])
def test_the_lm_ladder_runs_on_a_cpu_to_a_tokens_table(workload, results):
    """Every rung ok or skipped with its reason, tokens/s and both MFU columns ("n/a" on a CPU, with the reason)."""
    from harness.analysis.views.units import load_unit_table
    from tests.conftest import ONE_ROUND, harness_cli

    done = harness_cli("sweep", "+ladder=lm", f"workload={workload}", "size=smoke", *ONE_ROUND,
                       "measure.steps=3", "measure.warmup_steps=1", f"results_dir={results}", timeout=3000)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| rung | change | status | tokens/s | step ms | MFU (model FLOPs) | MFU (hardware FLOPs) |" in done.stdout
    assert "MFU n/a: a CPU has no peak in the device table" in done.stdout
    table = load_unit_table(str(results))
    assert len(table.rows) == 14
    for row in table.rows:
        assert row.status in ("ok", "skipped"), (row.change, row.status, row.note)
        assert row.status == "ok" or row.note, row.change  # a skip says why
        assert row.status != "ok" or (row.units_per_s and row.mfu is None)
    skipped = {row.change.split("=")[0] for row in table.rows if row.status == "skipped"}
    assert skipped == {"lm.sdpa_backend", "lm.float8", "lm.fsdp"}  # efficient and cuDNN: no CPU kernel
    assert [row.cache for row in table.rows if row.cache][:2] == ["warm", "cold"]


def test_packed_documents_fill_every_row_with_documents_ended_by_eos():
    from harness_models.gpt import PackedDocuments

    data = PackedDocuments(length=[64], vocab=100, mean_doc=20, rows=8, items=20, seed=1)
    item = data[9]
    assert len(data) == 20 and item["input_ids"].shape == (64,) and bool(item["attention_mask"].all())
    assert torch.equal(item["input_ids"], data[1]["input_ids"])  # round-robin over the rows held
    ends = int((data.ids == 99).sum())
    assert 8 * 64 / 40 < ends < 8 * 64 / 10  # documents of ~20 tokens: ~25 ends in 512 tokens
    assert int(data.ids.max()) == 99 and int(data.ids.min()) >= 0


def test_an_sdpa_backend_with_no_kernel_for_the_models_call_is_skipped_with_the_reason():
    from harness.run.child.outcome import SKIPPED, of_exception

    try:
        try:
            raise RuntimeError("No available kernel.  Aborting execution.")
        except RuntimeError as inner:
            raise ValueError("the step failed") from inner
    except ValueError as exc:
        outcome = of_exception(exc, "off")
    assert outcome.status == SKIPPED
    assert outcome.error.startswith("lm.sdpa_backend: none of the scaled_dot_product_attention kernels it allows")
