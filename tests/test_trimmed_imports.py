"""A reference workload's MONAI imported without the optional packages it never uses
(``harness.workload.trimmed_imports``): the same model, parameters, FLOPs and loss as a full import, the same augmented
3D patches; only MONAI's own imports trimmed (a package's subpackage alone where named so), and only inside the block;
what needs a trimmed package raises MONAI's OptionalImportError; a user's workload never trimmed, and a launcher that
trimmed forks none of its runs. Nothing here depends on the machine's speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from harness.run.parent import zygote
from harness.workload import trimmed_imports
from tests.conftest import REPO, once_per_run

# one fresh interpreter each: unet3d as the connectomics guide's reference builds it (smoke width), its parameters,
# the FLOPs of a training step on a meta copy, and the DiceCE loss of a seeded batch; with TRIM, inside the block
BUILD = textwrap.dedent("""
    import json, sys
    import torch
    from harness.workload import trimmed_imports
    with trimmed_imports.trimmed(sys.argv[1] == "trim"):
        import harness_models.segmentation3d as seg
    from torch.utils.flop_counter import FlopCounterMode
    torch.manual_seed(0)
    model = seg.unet3d(in_channels=1, out_channels=2, width=0.25)
    loss_fn = seg.dice_ce_loss()
    x = torch.randn(2, 1, 32, 32, 32)
    y = torch.randint(0, 2, (2, 1, 32, 32, 32))
    loss = loss_fn(model(x), y)
    with torch.device("meta"):
        meta = seg.unet3d(in_channels=1, out_channels=2, width=0.25)
    with FlopCounterMode(display=False) as counter:
        meta(torch.empty(2, 1, 32, 32, 32, device="meta")).sum().backward()
    print(json.dumps({"params": sum(p.numel() for p in model.parameters()),
                      "weights": float(sum(p.double().sum() for p in model.state_dict().values())),
                      "modules": [type(m).__name__ for m in model.modules()],
                      "flops": counter.get_total_flops(), "loss": float(loss), "loss_type": type(loss_fn).__name__,
                      "trimmed": trimmed_imports.trimmed_names(),
                      "torchvision_after": __import__("torchvision").__name__}))
""")


TRIMMED_FOR_UNET3D = ("cupy,cupyx,cv2,einops,h5py,huggingface_hub,matplotlib,mlflow,pandas,requests,scipy.ndimage,"
                      "scipy.optimize,scipy.signal,scipy.sparse,scipy.spatial,skimage,sklearn,tensorboard,tensorboardX,"
                      "tifffile,torch.utils.tensorboard,torchaudio,torchvision,transformers")

# one fresh interpreter each: the 3D data pipelines of the reference workloads, every augmentation on (MONAI's flips,
# rotation, elastic deformation, noise), from RAM and from NIfTI files through MONAI's LoadImaged, seeded as MONAI
# seeds (set_determinism); with TRIM, MONAI imported inside the block; then a MONAI feature that needs a trimmed scipy
# subpackage, called
PIPELINES = textwrap.dedent("""
    import json, sys, tempfile
    from pathlib import Path
    from harness.workload import trimmed_imports
    with trimmed_imports.trimmed(sys.argv[1] == "trim"):
        import harness_models.segmentation3d
    import torch
    from harness.workload import datasets
    from harness.workload.data import build_dataset
    from monai.utils import set_determinism
    from tests.conftest import tiny_config
    sums = {}
    with tempfile.TemporaryDirectory() as cache:
        for source in ("synthetic", "disk"):
            cfg = tiny_config(data__augment="heavy", data__source=source, data__num_items=2, data__cache_dir=cache,
                              **({"data__cache": "none"} if source == "disk" else {}))
            if source == "disk":
                datasets.ensure(datasets.spec_for(cfg, cfg.workload), Path(cache), log=lambda *_: None)
            set_determinism(0)  # MONAI's Compose seeds its random transforms from it
            items = [build_dataset(cfg, cfg.workload)[i] for i in range(3)]
            sums[source] = [[float(t.double().sum()) for t in item] for item in items]
    from monai.transforms import FillHoles
    try:
        FillHoles()(torch.ones(1, 8, 8, 8))  # scipy.ndimage's binary structures
        error = ""
    except Exception as exc:
        error = type(exc).__name__
    print(json.dumps({"sums": sums, "trimmed": trimmed_imports.trimmed_names(), "ndimage": error,
                      "stats": "scipy.stats" in sys.modules}))
""")


def _both(script: str, env: dict | None = None) -> tuple[dict, dict]:
    """``script`` run full and trimmed, in two fresh interpreters at once; the JSON each printed last."""
    procs = {how: subprocess.Popen([sys.executable, "-c", script, how], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True) for how in ("full", "trim")}
    out = {}
    for how, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, stderr[-2000:]
        out[how] = json.loads(stdout.strip().splitlines()[-1])
    return out["full"], out["trim"]


@pytest.fixture(scope="module")
def pipelines_then_build(tmp_path_factory) -> tuple[dict, dict]:
    """PIPELINES, then BUILD, in the same two fresh interpreters (full and trimmed): MONAI's import, seconds on a
    2-core CPU, paid once a way. BUILD's import of the reference module finds it imported, under the same trimming;
    PIPELINES' findings are read before BUILD imports torchvision."""
    script = PIPELINES.replace("print(json.dumps(", "pipelines = dict((") + BUILD.replace(
        "print(json.dumps({", "print(json.dumps({**pipelines, ")
    full, trim = once_per_run(tmp_path_factory, "pipelines-then-build", lambda: _both(script))
    return full, trim


def test_reference_pipelines_augment_alike_without_the_trimmed_scipy_subpackages(pipelines_then_build):
    full, trim = pipelines_then_build
    assert full["trimmed"] == "" and trim["trimmed"] == TRIMMED_FOR_UNET3D
    assert trim["sums"] == full["sums"]  # the same patches, every augmentation on, from RAM and from disk
    assert len(full["sums"]["disk"]) == 3 and full["sums"]["disk"] != full["sums"]["synthetic"]
    assert full["ndimage"] == "" and trim["ndimage"] == "OptionalImportError"  # what needs it fails loudly, MONAI's way
    assert full["stats"] and not trim["stats"]  # scipy.signal's import of scipy.stats goes with it


def test_reference_model_loss_and_flops_equal_a_full_import(pipelines_then_build):
    full, trim = pipelines_then_build
    assert full["trimmed"] == ""
    assert trim["trimmed"] == TRIMMED_FOR_UNET3D
    assert trim["torchvision_after"] == "torchvision"  # imported after the block: the real package
    for key in ("params", "weights", "modules", "flops", "loss", "loss_type"):
        assert trim[key] == full[key], key
    assert full["params"] > 100_000 and full["flops"] > 0


@pytest.fixture
def fake_packages(tmp_path, monkeypatch):
    """A stand-in MONAI (``fakemonai``: a module handling an absent optional package as MONAI does) and an optional
    package (``fakeopt``), and a reference workload's module importing the optional package itself."""
    (tmp_path / "fakemonai").mkdir()
    (tmp_path / "fakemonai" / "__init__.py").write_text("")
    (tmp_path / "fakemonai" / "nets.py").write_text(
        "try:\n    import fakeopt.sub\n    HAS = True\nexcept ImportError:\n    HAS = False\n")
    (tmp_path / "fakeopt").mkdir()
    (tmp_path / "fakeopt" / "__init__.py").write_text("")
    (tmp_path / "fakeopt" / "sub.py").write_text("VALUE = 7\n")
    (tmp_path / "fakeref.py").write_text("import fakeopt.sub\nHAS = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(trimmed_imports, "OPTIONAL", ("fakeopt",))
    monkeypatch.setattr(trimmed_imports, "TRIMMED_BY", "fakemonai")
    monkeypatch.setattr(trimmed_imports, "TRIMMED", set())
    yield
    for name in [m for m in sys.modules if m.partition(".")[0] in ("fakemonai", "fakeopt", "fakeref")]:
        del sys.modules[name]


def test_only_monais_own_imports_are_trimmed_and_only_inside(fake_packages):
    import importlib

    with trimmed_imports.trimmed():
        nets = importlib.import_module("fakemonai.nets")
        assert nets.HAS is False  # MONAI's own import: as if not installed
        assert "fakeopt" not in sys.modules
        ref = importlib.import_module("fakeref")  # a reference module importing it itself gets it
        assert ref.HAS is True and sys.modules["fakeopt.sub"].VALUE == 7
    assert trimmed_imports.trimmed_names() == "fakeopt"
    assert not any(isinstance(f, trimmed_imports._Trimmer) for f in sys.meta_path)


def test_a_subpackage_is_trimmed_alone(fake_packages, monkeypatch):
    import importlib

    monkeypatch.setattr(trimmed_imports, "OPTIONAL", ("fakeopt.sub",))  # as scipy.signal: its package stays
    with trimmed_imports.trimmed():
        assert importlib.import_module("fakemonai.nets").HAS is False
        assert "fakeopt" in sys.modules and "fakeopt.sub" not in sys.modules
    assert trimmed_imports.trimmed_names() == "fakeopt.sub"
    assert importlib.import_module("fakeopt.sub").VALUE == 7


def test_after_the_block_a_trimmed_package_imports_for_real(fake_packages):
    import importlib

    with trimmed_imports.trimmed():
        assert importlib.import_module("fakemonai.nets").HAS is False
    assert importlib.import_module("fakeopt.sub").VALUE == 7
    with trimmed_imports.trimmed(on=False):
        del sys.modules["fakemonai.nets"]
        assert importlib.import_module("fakemonai.nets").HAS is True


REFERENCE = {"model": {"_target_": "harness_models.segmentation3d.unet3d", "in_channels": 1},
             "loss": {"_target_": "harness_models.segmentation3d.dice_ce_loss"},
             "optimizer": {"_target_": "torch.optim.Adam", "_partial_": True},
             "checkpoint_units": ["monai.networks.blocks.ResidualUnit"], "step": {"_target_": None}}


@pytest.mark.parametrize("where", ["model", "loss", "optimizer", "dataset", "step"])
def test_a_users_target_anywhere_is_not_a_reference_workload(where):
    assert trimmed_imports.reference_only(REFERENCE)
    assert not trimmed_imports.reference_only(dict(REFERENCE, **{where: {"_target_": "mypkg.nets.Thing"}}))
    assert not trimmed_imports.reference_only({"model": {"_target_": None}})
    assert not trimmed_imports.reference_only({"model": {"_target_": "torch.nn.Conv1d"}})  # a user's torch model


def test_the_child_trims_a_reference_workload_only():
    from harness.config.workload import WorkloadSpec

    spec = WorkloadSpec(model=REFERENCE["model"], loss=REFERENCE["loss"])
    assert trimmed_imports.reference_only(spec)
    spec.model = {"_target_": "mypkg.nets.Thing"}
    assert not trimmed_imports.reference_only(spec)


def _job(tmp_path, values: dict):
    (tmp_path / "config.json").write_text(json.dumps({"workload": values}))
    return {"job": str(tmp_path)}


def test_a_launcher_that_trimmed_forks_no_users_run(tmp_path, monkeypatch):
    monkeypatch.setattr(trimmed_imports, "TRIMMED", set())
    user = dict(REFERENCE, model={"_target_": "mypkg.nets.Thing"})
    assert zygote.trimmed_for_another(_job(tmp_path, user)) == ""  # nothing trimmed here: any run forks
    monkeypatch.setattr(trimmed_imports, "TRIMMED", {"torchvision", "mlflow"})
    assert zygote.trimmed_for_another(_job(tmp_path, REFERENCE)) == ""
    why = zygote.trimmed_for_another(_job(tmp_path, user))
    assert why.startswith(zygote.TRIMMED) and "mlflow,torchvision" in why


# a fresh interpreter: a GPU machine's image holds CuPy, scikit-image, h5py, tifffile, torchaudio and einops, which
# MONAI asks for when imported; each stand-in here starts a thread when imported, as a library touching a GPU may
GPU_IMAGE = textwrap.dedent("""
    import json, sys
    import torch
    from harness.run.parent import zygote
    from harness.workload import trimmed_imports
    with trimmed_imports.trimmed(sys.argv[1] == "trim"):
        import harness_models.segmentation3d
    print(json.dumps({"imported": sorted(n for n in STAND_INS if n in sys.modules),
                      "unsafe": zygote.unsafe_to_fork()}))
""")
STAND_INS = ("cupy", "cupyx", "skimage", "h5py", "tifffile", "torchaudio", "einops")


def test_a_gpu_images_packages_are_not_imported_for_a_reference_workload(tmp_path):
    for name in STAND_INS:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(
            "import threading, time\nthreading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    full, trim = _both(f"STAND_INS = {STAND_INS!r}\n" + GPU_IMAGE, env)
    out = {"full": full, "trim": trim}
    assert out["full"]["imported"] == sorted(STAND_INS)  # MONAI asks for every one of them
    assert "threads in the launcher" in out["full"]["unsafe"]  # and a launcher holding them could not fork
    assert out["trim"] == {"imported": [], "unsafe": ""}
