"""On-disk datasets, written once and deterministically into a cache folder, in the field's formats:
compressed NIfTI volumes (image + label) for the 3D workloads, JPEG files for ResNet-50.

Runs in the parent, before any measurement: building is never timed, and a broken cache is found
and repaired here, with the path named, rather than crashing mid-sweep. No torch needed.

A dataset's folder is named by the hash of what defines it (kind, shape, count, seed, format
version), so other settings get another folder and the same settings reuse it. ``manifest.json``
is written last and holds each file's SHA-256: a dataset without one is incomplete, and a file
whose checksum differs is regenerated.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from harness.fileio import write_text_atomic
from harness.workload.volumes import make_volume

FORMAT_VERSION = 1


@dataclass(frozen=True)
class DiskSpec:
    kind: str  # "nifti3d" or "jpeg2d"
    item_shape: tuple[int, ...]  # stored volume / image size (crops are taken from it)
    num_items: int
    num_classes: int
    seed: int

    def key(self) -> str:
        blob = json.dumps({**asdict(self), "format": FORMAT_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def bytes_needed(self) -> int:
        """An upper bound: files stored uncompressed (image + label for volumes)."""
        voxels = int(np.prod(self.item_shape))
        per_item = voxels * (4 + 1) if self.kind == "nifti3d" else voxels * 3
        return per_item * self.num_items + (1 << 20)


@dataclass(frozen=True)
class DiskDataset:
    root: Path
    spec: DiskSpec
    items: list[dict]  # {"image": path, "label": path or int}
    repaired: list[str]


def spec_for(cfg, workload) -> DiskSpec:
    stored = tuple(int(s * 1.5) for s in cfg.data.patch_size) if workload.spatial_dims == 3 else \
        tuple(int(s * 8 / 7) for s in cfg.data.patch_size)
    return DiskSpec(kind="nifti3d" if workload.spatial_dims == 3 else "jpeg2d", item_shape=stored,
                    num_items=cfg.data.num_items, num_classes=workload.num_classes, seed=cfg.seed)


def cache_root(cfg) -> Path:
    return Path(cfg.data.cache_dir or os.path.join(cfg.results_dir, ".cache", "datasets"))


def prepare(cfg, log=print) -> None:
    """Build (once) or repair the on-disk dataset a resolved config reads, before anything is timed (nothing for a
    config that reads no data from disk)."""
    if cfg.data.source == "disk":
        ensure(spec_for(cfg, cfg.workload), cache_root(cfg), log)


def ensure(spec: DiskSpec, root: Path, log=print) -> DiskDataset:
    """The dataset of ``spec`` under ``root``: reused if complete and intact, else (re)built."""
    folder = root / f"{spec.kind}-{spec.key()}"
    manifest = folder / "manifest.json"
    if manifest.exists():
        try:
            files = json.loads(manifest.read_text())["files"]
        except (json.JSONDecodeError, KeyError):
            log(f"dataset manifest {manifest} is unreadable: rebuilding the dataset")
            files = None
        if files is not None:
            repaired = _repair(spec, folder, files, log)
            return DiskDataset(folder, spec, _items(spec, folder), repaired)
    _check_space(spec, root)
    folder.mkdir(parents=True, exist_ok=True)
    log(f"writing {spec.num_items} {spec.kind} items of {list(spec.item_shape)} to {folder} (once)")
    files = {}
    for i in range(spec.num_items):
        for name in _write_item(spec, folder, i):
            files[name] = _sha256(folder / name)
    # durable, and a temp of its own: two jobs of a campaign may prepare one dataset side by side
    write_text_atomic(manifest, json.dumps({"spec": asdict(spec), "files": files}, indent=1), durable=True)
    return DiskDataset(folder, spec, _items(spec, folder), [])


def _check_space(spec: DiskSpec, root: Path) -> None:
    probe = root
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    need = spec.bytes_needed()
    if free < need:
        raise OSError(f"data cache {root} has {free / 2**30:.2f} GiB free; the dataset needs up to "
                      f"{need / 2**30:.2f} GiB. Free space or set data.cache_dir to another disk")


def _repair(spec: DiskSpec, folder: Path, files: dict[str, str], log) -> list[str]:
    """Regenerate every file that is missing or whose checksum differs; return their paths."""
    repaired = []
    for name, digest in sorted(files.items()):
        path = folder / name
        if path.exists() and _sha256(path) == digest:
            continue
        log(f"cached data file {path} is missing or corrupt: rewriting it")
        index = int(name.split("_")[1].split(".")[0])
        _write_item(spec, folder, index)
        repaired.append(str(path))
    return repaired


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _item_rng(spec: DiskSpec, index: int) -> np.random.Generator:
    return np.random.default_rng([spec.seed, index])


def _write_item(spec: DiskSpec, folder: Path, index: int) -> list[str]:
    rng = _item_rng(spec, index)
    if spec.kind == "nifti3d":
        import nibabel as nib


        image, label = make_volume(spec.item_shape, rng)
        names = [f"image_{index:05d}.nii.gz", f"label_{index:05d}.nii.gz"]
        for name, array in zip(names, (image, label.astype(np.uint8))):
            nib.save(nib.Nifti1Image(array, affine=np.eye(4)), str(folder / name))
        return names
    from PIL import Image

    pixels = _image_pixels(spec.item_shape, rng)
    name = f"image_{index:05d}.jpg"
    Image.fromarray(pixels).save(folder / name, quality=90)
    return [name]


def _image_pixels(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """A smooth random RGB picture (JPEG-friendly, like a photo rather than noise)."""
    small = rng.integers(0, 256, size=(max(2, shape[0] // 16), max(2, shape[1] // 16), 3)).astype(np.float32)
    rows = np.linspace(0, small.shape[0] - 1, shape[0]).round().astype(int)
    cols = np.linspace(0, small.shape[1] - 1, shape[1]).round().astype(int)
    img = small[rows][:, cols] + rng.normal(0, 12, size=(*shape, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def locate(spec: DiskSpec, root: Path) -> list[dict]:
    """The items of an existing dataset (built by :func:`ensure` in the parent)."""
    folder = root / f"{spec.kind}-{spec.key()}"
    if not (folder / "manifest.json").exists():
        raise FileNotFoundError(f"dataset {folder} is missing or incomplete: "
                                "it is built by harness.workload.datasets.ensure")
    return _items(spec, folder)


def _items(spec: DiskSpec, folder: Path) -> list[dict]:
    if spec.kind == "nifti3d":
        return [{"image": str(folder / f"image_{i:05d}.nii.gz"), "label": str(folder / f"label_{i:05d}.nii.gz")}
                for i in range(spec.num_items)]
    labels = np.random.default_rng(spec.seed).integers(0, spec.num_classes, size=spec.num_items)
    return [{"image": str(folder / f"image_{i:05d}.jpg"), "label": int(labels[i])} for i in range(spec.num_items)]
