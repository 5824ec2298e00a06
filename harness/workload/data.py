"""The data pipelines: synthetic (in RAM) or on disk (NIfTI / JPEG), with the guides' augmentations,
always served through a real ``torch.utils.data.DataLoader`` so the loader knobs act.

* ``data.source=synthetic``: 3D volumes with labelled ellipsoid structures held in RAM (the
  connectomics guide's preloaded cache), each item a random crop; 2D uint8 images in RAM, each item
  a random crop. Loading costs only the crop.
* ``data.source=disk``: files written once by ``harness.workload.datasets``; 3D items are read with MONAI's
  ``LoadImaged`` every time (``data.cache=none``) or once into a ``CacheDataset`` (``data.cache=ram``);
  2D items are JPEG files decoded per sample (or decoded once with ``data.cache=ram``).
* Augmentation (``data.augment=none|light|heavy`` plus one switch per transform): 3D random flip and
  Gaussian noise (fast), rotation (slow in 3D), elastic deformation (very slow) as MONAI transforms;
  2D random-resized crop, flip, colour jitter and mixup/cutmix as torchvision v2 transforms.
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from harness import lifeline
from harness.workload import shared_data
from harness.workload.volumes import make_volume
from harness.workload import datasets, storage
from harness.workload.build import build_user_dataset
from harness.workload.tokens import RandomTokens

AUGMENT_PRESETS = {
    "none": dict(flip=False, noise=False, rotate=False, elastic=False, mixup=False),
    "light": dict(flip=True, noise=True, rotate=False, elastic=False, mixup=False),
    "heavy": dict(flip=True, noise=True, rotate=True, elastic=True, mixup=True),
}
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def augment_switches(cfg) -> dict[str, bool]:
    """The preset's switches, each overridable on its own (``data.rotate=false``)."""
    switches = dict(AUGMENT_PRESETS[cfg.data.augment])
    for name in switches:
        value = getattr(cfg.data, name)
        if value is not None:
            switches[name] = bool(value)
    return switches


# ------------------------------------------------------------------------------------------
# 3D


def volume_augmentation(switches: dict[str, bool]):
    """MONAI dict transforms on {"image", "label"} patches; None when nothing is switched on.

    Rotation and elastic deformation apply to every sample when on: the worst case the
    connectomics guide warns of ("rotate and elastic are expensive in 3D").
    """
    from monai import transforms as T

    keys = ["image", "label"]
    steps = []
    if switches["flip"]:
        steps += [T.RandFlipd(keys, prob=0.5, spatial_axis=axis) for axis in range(3)]
    if switches["rotate"]:
        steps.append(T.RandRotated(keys, range_x=0.3, range_y=0.3, range_z=0.3, prob=1.0, mode=("bilinear", "nearest"),
                                   padding_mode="zeros"))
    if switches["elastic"]:
        steps.append(T.Rand3DElasticd(keys, sigma_range=(5, 8), magnitude_range=(50, 150), prob=1.0,
                                      mode=("bilinear", "nearest"), padding_mode="zeros"))
    if switches["noise"]:
        steps.append(T.RandGaussianNoised(["image"], prob=0.5, std=0.1))
    return T.Compose(steps) if steps else None


LABEL_DTYPE = torch.uint8  # label maps cross the loader as segmentation loaders keep them; the loss widens on device


class ToPair:
    """{"image", "label"} (MetaTensors or arrays) -> (float32 image, uint8 label) plain tensors."""

    def __call__(self, item):
        image, label = item["image"], item["label"]
        image = image.as_tensor() if hasattr(image, "as_tensor") else torch.as_tensor(image)
        label = label.as_tensor() if hasattr(label, "as_tensor") else torch.as_tensor(label)
        return image.float().contiguous(), label.round().to(LABEL_DTYPE).contiguous()


class RandomCropVolumes(Dataset):
    """Random patches (image [1, D, H, W] float32, label [1, D, H, W] uint8) cropped from in-RAM volumes: the
    connectomics guide's preloaded cache, which holds label maps in uint8 (not int64, 8x the bytes to collate, pin
    and copy to the device per batch)."""

    def __init__(self, patch_size, length: int, num_volumes: int = 4, seed: int = 0, augment=None):
        self.patch_size = tuple(patch_size)
        self.length = length
        rng = np.random.default_rng(seed)
        volume_shape = tuple(int(s * 1.5) for s in self.patch_size)
        pairs = shared_data.once("crop-volumes", {"shape": volume_shape, "volumes": num_volumes, "seed": seed},
                                 lambda: [make_volume(volume_shape, rng) for _ in range(num_volumes)])
        self.images = [torch.from_numpy(img)[None] for img, _ in pairs]
        self.labels = [torch.from_numpy(lbl.astype(np.uint8))[None] for _, lbl in pairs]
        self.seed = seed
        self.augment = augment

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        v = int(torch.randint(len(self.images), (1,), generator=g))
        image, label = self.images[v], self.labels[v]
        slices = [slice(None)]
        for full, patch in zip(image.shape[1:], self.patch_size):
            start = int(torch.randint(full - patch + 1, (1,), generator=g))
            slices.append(slice(start, start + patch))
        x, y = image[tuple(slices)], label[tuple(slices)]
        if self.augment is not None:
            return ToPair()(self.augment({"image": x, "label": y}))
        return x.contiguous(), y.contiguous()


class Repeat(Dataset):
    """``length`` items cycling over a smaller dataset (an epoch longer than the file count)."""

    def __init__(self, dataset: Dataset, length: int):
        self.dataset, self.length = dataset, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        return self.dataset[index % len(self.dataset)]


def disk_volumes(cfg, items: list[dict], length: int, switches: dict[str, bool]) -> Dataset:
    """NIfTI volumes read with MONAI's LoadImaged, cropped and augmented per item."""
    from monai import data as mdata
    from monai import transforms as T

    load = [T.LoadImaged(["image", "label"], image_only=True), T.EnsureChannelFirstd(["image", "label"])]
    random = [T.RandSpatialCropd(["image", "label"], roi_size=list(cfg.data.patch_size), random_size=False)]
    aug = volume_augmentation(switches)
    if aug is not None:
        random.append(aug)
    pipeline = T.Compose(load + random + [ToPair()])
    if cfg.data.cache == "ram":  # the deterministic part (load) runs once, as use_preloaded_cache does
        dataset = mdata.CacheDataset(items, pipeline, cache_rate=1.0, num_workers=0, progress=False)
    else:
        dataset = mdata.Dataset(items, pipeline)
    dataset.set_random_state(seed=cfg.seed) if hasattr(dataset, "set_random_state") else None
    return Repeat(dataset, length)


# ------------------------------------------------------------------------------------------
# 2D


def image_augmentation(image_size, switches: dict[str, bool], random_resized: bool):
    """torchvision v2 transforms from a uint8 [3, H, W] image to a normalised float tensor."""
    from torchvision.transforms import v2

    steps = [v2.RandomResizedCrop(list(image_size), antialias=True) if random_resized
             else v2.RandomCrop(list(image_size))]
    if switches["flip"]:
        steps.append(v2.RandomHorizontalFlip())
    if switches["noise"]:  # the 2D counterpart of intensity noise: colour jitter
        steps.append(v2.ColorJitter(0.4, 0.4, 0.4))
    steps += [v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]
    return v2.Compose(steps)


class RandomCropImages(Dataset):
    """ImageNet-like samples: uint8 images in RAM (class labels), cropped and augmented per item."""

    def __init__(self, image_size, length: int, num_images: int, num_classes: int, seed: int, transform):
        self.length = length
        stored = tuple(int(s * 8 / 7) for s in image_size)  # 224 crops from 256 images

        def make():
            g = torch.Generator().manual_seed(seed)
            images = torch.randint(0, 256, (num_images, 3, *stored), dtype=torch.uint8, generator=g)
            return [(images.numpy(), torch.randint(0, num_classes, (num_images,), generator=g).numpy())]

        key = {"shape": stored, "images": num_images, "classes": num_classes, "seed": seed}
        ((images, labels),) = shared_data.once("crop-images", key, make)
        self.images, self.labels = torch.from_numpy(images), torch.from_numpy(labels)
        self.transform = transform

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        i = index % len(self.images)
        return self.transform(self.images[i]), self.labels[i]


class JpegImages(Dataset):
    """JPEG files decoded per sample (``cache=False``) or once, up front (``cache=True``)."""

    def __init__(self, items: list[dict], length: int, transform, cache: bool):
        self.items, self.length, self.transform = items, length, transform
        self.decoded = [self._decode(it["image"]) for it in items] if cache else None

    @staticmethod
    def _decode(path: str) -> torch.Tensor:
        """PIL decode (as torchvision's ImageFolder does) into a uint8 [3, H, W] tensor."""
        from PIL import Image

        with Image.open(path) as img:
            return torch.from_numpy(np.array(img.convert("RGB"))).permute(2, 0, 1).contiguous()

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        i = index % len(self.items)
        image = self.decoded[i] if self.decoded is not None else self._decode(self.items[i]["image"])
        return self.transform(image), self.items[i]["label"]


class MixupCollate:
    """Batch-level mixup or cutmix (one of the two per batch), as timm and torchvision apply them."""

    def __init__(self, num_classes: int):
        from torchvision.transforms import v2

        self.mix = v2.RandomChoice([v2.MixUp(num_classes=num_classes), v2.CutMix(num_classes=num_classes)])

    def __call__(self, batch):
        return self.mix(*default_collate(batch))


# ------------------------------------------------------------------------------------------
# any model: random tensors


class RandomTensors(Dataset):
    """Random samples of one shape (channels first) with targets of one kind, from a pool held in RAM:

    * ``class``: an int64 class index in [0, num_classes);
    * ``segmentation``: an int64 class per spatial position (shape = the sample's spatial sides, as
      ``torch.nn.CrossEntropyLoss`` takes it);
    * ``regression``: a float32 tensor of ``target_shape``.
    """

    def __init__(self, shape, target: str, num_classes: int, target_shape, length: int, pool: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.inputs = torch.randn((pool, *shape), generator=g)
        if target == "class":
            self.targets = torch.randint(0, num_classes, (pool,), generator=g)
        elif target == "segmentation":
            self.targets = torch.randint(0, num_classes, (pool, *shape[1:]), generator=g)
        else:
            self.targets = torch.randn((pool, *target_shape), generator=g)
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        i = index % len(self.inputs)
        return self.inputs[i], self.targets[i]


# ------------------------------------------------------------------------------------------


def build_dataset(cfg, workload, replicas: int = 1, own_data: Dataset | None = None) -> Dataset:
    """The dataset the settings describe (disk datasets must exist: ``harness.workload.datasets.ensure``), with the
    storage cost asked for (``data.read_latency_ms``, ``data.page_cache``). With ``replicas`` ranks sharing it,
    it is that many times longer: an epoch is still ``epoch_steps`` on each. ``own_data``: a LightningModule's own
    training data (its ``train_dataloader()``'s dataset), used when the workload names no dataset."""
    dataset = _dataset(cfg, workload, replicas, own_data)
    if not cfg.data.read_latency_ms and cfg.data.page_cache == "keep" and not cfg.data.storage_items_per_s:
        return dataset
    files = None
    if cfg.data.page_cache == "drop":
        items = datasets.locate(datasets.spec_for(cfg, workload), datasets.cache_root(cfg))
        files = [[str(v) for k, v in item.items() if k in ("image", "label") and isinstance(v, str)] for item in items]
    ceiling = storage.run_ceiling(cfg.data.storage_items_per_s) if cfg.data.storage_items_per_s else None
    return StorageCost(dataset, cfg.data.read_latency_ms / 1000.0, files, ceiling)


class StorageCost(Dataset):
    """Storage as slow as asked: ``latency_s`` waited per item (a network file system's round trips, which loader
    workers overlap as they would real ones), then, with a ``ceiling``, a slot of the throughput every reader of the
    run shares (``harness.workload.storage``); with ``files`` (the paths of item i % len(files)) their pages
    dropped from the page cache after each read, so that the next read comes from the device and not from RAM."""

    def __init__(self, dataset: Dataset, latency_s: float, files: list[list[str]] | None, ceiling=None):
        self.dataset, self.latency_s, self.files, self.ceiling = dataset, latency_s, files, ceiling

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        if self.latency_s:
            time.sleep(self.latency_s)
        if self.ceiling is not None:
            self.ceiling.wait()
        item = self.dataset[index]
        if self.files:
            for path in self.files[index % len(self.files)]:
                drop_from_page_cache(path)
        return item


def drop_from_page_cache(path: str) -> None:
    """Write back (the dataset may have just been written) and drop a file's cached pages."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _dataset(cfg, workload, replicas: int = 1, own_data: Dataset | None = None) -> Dataset:
    length = cfg.batch_size * cfg.accumulate_grad_batches * cfg.data.epoch_steps * replicas
    if workload.dataset is not None:
        return Repeat(build_user_dataset(workload, cfg), length)
    if own_data is not None:
        return Repeat(own_data, length)
    if workload.synthetic == "tokens":
        return RandomTokens(cfg.data.patch_size[-1], workload.num_classes, length, 4 * cfg.data.num_volumes, cfg.seed)
    if workload.synthetic == "tensors":
        shape = [workload.in_channels, *cfg.data.patch_size]
        target_shape = workload.target_shape or [workload.num_classes]
        return RandomTensors(shape, workload.target, workload.num_classes, target_shape, length,
                             4 * cfg.data.num_volumes, cfg.seed)
    switches = augment_switches(cfg)
    if cfg.data.source == "disk":
        items = datasets.locate(datasets.spec_for(cfg, workload), datasets.cache_root(cfg))
        if workload.spatial_dims == 3:
            return disk_volumes(cfg, items, length, switches)
        transform = image_augmentation(cfg.data.patch_size, switches, random_resized=cfg.data.augment != "none")
        return JpegImages(items, length, transform, cache=cfg.data.cache == "ram")
    if workload.spatial_dims == 3:
        return RandomCropVolumes(cfg.data.patch_size, length, cfg.data.num_volumes, cfg.seed,
                                 volume_augmentation(switches))
    transform = image_augmentation(cfg.data.patch_size, switches, random_resized=cfg.data.augment != "none")
    return RandomCropImages(cfg.data.patch_size, length, 16 * cfg.data.num_volumes, workload.num_classes, cfg.seed,
                            transform)


def build_loader(cfg, dataset: Dataset, workload=None, rank=None, collate=None) -> DataLoader:
    """The DataLoader with every loader knob applied as given (validated beforehand). Under DDP (``rank``: a
    ``harness.run.child.ranks.Rank`` of several) a DistributedSampler gives each rank its own share of every epoch.
    ``collate``: the workload's own collate function (``workload.collate``, a LightningModule's loader's)."""
    sampler = None
    if rank is not None and rank.world_size > 1:
        from torch.utils.data.distributed import DistributedSampler

        sampler = DistributedSampler(dataset, num_replicas=rank.world_size, rank=rank.rank, shuffle=True,
                                     seed=cfg.seed, drop_last=True)
    kwargs = dict(
        batch_size=cfg.batch_size,
        shuffle=sampler is None,
        sampler=sampler,
        drop_last=True,
        num_workers=cfg.data.num_workers,
        pin_memory=bool(cfg.data.pin_memory),
        persistent_workers=bool(cfg.data.persistent_workers),
        generator=torch.Generator().manual_seed(cfg.seed),
        worker_init_fn=lifeline.worker_init if cfg.data.num_workers > 0 else None,  # workers die with the run
    )
    if cfg.data.prefetch_factor is not None:
        kwargs["prefetch_factor"] = cfg.data.prefetch_factor
    if cfg.data.multiprocessing_context and cfg.data.num_workers > 0:  # a validation loader may have none
        kwargs["multiprocessing_context"] = cfg.data.multiprocessing_context
    if workload is not None and workload.spatial_dims == 2 and augment_switches(cfg)["mixup"]:
        kwargs["collate_fn"] = MixupCollate(workload.num_classes)
    if collate is not None:
        kwargs["collate_fn"] = collate
    return DataLoader(dataset, **kwargs)


def endless(loader: DataLoader):
    """Batches forever, starting a new epoch (and, without persistent workers, new workers) as needed."""
    epoch = 0
    while True:
        if hasattr(loader.sampler, "set_epoch"):  # DistributedSampler: a new shuffle each epoch, as in training
            loader.sampler.set_epoch(epoch)
        yield from loader
        epoch += 1
