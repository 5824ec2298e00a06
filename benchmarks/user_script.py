"""A training script as a user writes it, for the end-to-end comparison in ``benchmarks/overhead.py --as-users``.

    python benchmarks/user_script.py resnet50|unet3d|unet3d-full [--steps 30] [--warmup 5]
                                     [--data random|synthetic] [--labels int64|uint8] [--mode model|train] [--flops]
                                     [--step-fn]

It imports torch and the model's own library (torchvision or MONAI) and nothing of the harness but, with
``--data synthetic``, the numpy function that draws the harness's synthetic volumes: the same model, batch,
optimizer and loss that ``python -m harness run`` measures with the settings in ``HARNESS_SETTINGS``, the loss read
at step 0 and every 10 steps (the harness's default logging), and its throughput printed as the samples of the timed
steps over the sum of their times (the window, as the harness reports it). The last line of stdout is JSON, with the
minor page faults a timed step took (``minor_faults_per_step``, ``getrusage`` across the timed steps): a count that
does not depend on the machine's load, which says which state glibc's heap is in (docs/measuring.md), and
Python's collections inside the timed steps (``window_collections``: how many of each generation, 0 to 2, and
``window_gc_s``: their seconds, from ``gc.callbacks``): the script collects nothing itself, as a user's does, so a
full collection that its set-up owes may fall in its timed steps, where the harness's child collects before its
warm-up.

* ``--data random`` (the default): one batch of random numbers, int64 labels; with ``--labels uint8`` (a 3D label
  map only) the labels are uint8, as the harness's own label maps are: the plain script of the full-size unet3d
  comparison in docs/measuring.md (the same MONAI UNet, Adam, DiceCE with uint8 labels, one batch in memory).
* ``--data synthetic``: what the harness's workload trains on (``data=synthetic``): random crops of labelled
  ellipsoid volumes with uint8 labels (3D), or random crops of uint8 images, scaled and normalised (2D), through a
  ``DataLoader`` (no workers, shuffled, an epoch of the size preset's ``epoch_steps``).
* ``--mode model`` (the default): one batch kept in memory (the harness's ``measure.mode=model``: with synthetic
  data, the loader's first batch); ``--mode train``: a batch from the loader every step (``measure.mode=train``,
  synthetic data only).
* ``--step-fn``: each step a function, whose loss and graph go when it returns; without it the loop keeps ``loss``
  from one iteration until the next step's forward replaces it, as a loop written inline does. Which of the two a
  script does changes where glibc's heap is trimmed and grown again, and with it the page faults a step
  (docs/measuring.md, the full-size unet3d window).
* ``--flops``: first count the model's FLOPs on the meta device, as the harness's child does before it builds the
  model (what that leaves in the process is then on both sides).
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

# What ``python -m harness run`` is given for the same training (its workload's settings at this size).
HARNESS_SETTINGS = {
    "resnet50": ["workload=resnet50", "size=full", "batch_size=8", "data.patch_size=[64,64]", "precision=32"],
    "unet3d": ["workload=unet3d", "size=smoke", "precision=32"],
    # the connectomics guide's full-width UNet at a CPU-sized batch and patch
    "unet3d-full": ["workload=unet3d", "size=full", "batch_size=2", "data.patch_size=[32,32,32]", "precision=32"],
}
# What those settings resolve to: batch, sample shape (channels first), UNet width, epoch_steps, classes.
SHAPES = {
    "resnet50": dict(batch=8, shape=(3, 64, 64), width=None, epoch_steps=250, classes=1000),
    "unet3d": dict(batch=2, shape=(1, 32, 32, 32), width=0.25, epoch_steps=10, classes=2),
    "unet3d-full": dict(batch=2, shape=(1, 32, 32, 32), width=1.0, epoch_steps=250, classes=2),
}
LOG_EVERY = 10
LABEL_DTYPES = ("int64", "uint8")  # --labels: a random label map's dtype
SEED = 0
NUM_VOLUMES = 4  # data.num_volumes: volumes (or 16x as many images) held in RAM to crop from
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def resnet50(width=None):
    from torchvision.models import resnet50 as tv_resnet50

    model = tv_resnet50(weights=None, num_classes=1000)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    return model, torch.nn.CrossEntropyLoss(), optimizer


def unet3d(width: float):
    from monai.losses import DiceCELoss
    from monai.networks.nets import UNet

    channels = tuple(max(4, int(round(c * width / 4)) * 4) for c in (32, 64, 128, 256, 512))
    model = UNet(spatial_dims=3, in_channels=1, out_channels=2, channels=channels, strides=(2, 2, 2, 2),
                 num_res_units=2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    return model, DiceCELoss(to_onehot_y=True, softmax=True), optimizer


def random_batch(name: str, labels: str = "int64"):
    """One batch of random numbers: a label map of ``labels`` (int64 or uint8) for 3D, class indices for 2D."""
    spec = SHAPES[name]
    x = torch.randn(spec["batch"], *spec["shape"])
    if len(spec["shape"]) == 4:
        return x, torch.randint(0, spec["classes"], (spec["batch"], 1, *spec["shape"][1:]),
                                dtype=getattr(torch, labels))
    return x, torch.randint(0, spec["classes"], (spec["batch"],))


class VolumeCrops(Dataset):
    """Random crops (image float32, label uint8) of labelled ellipsoid volumes held in RAM, 1.5x the patch a side."""

    def __init__(self, patch, length: int):
        from harness.workload.volumes import make_volume  # numpy only: the harness's synthetic volumes, drawn alike

        rng = np.random.default_rng(SEED)
        side = tuple(int(s * 1.5) for s in patch)
        pairs = [make_volume(side, rng) for _ in range(NUM_VOLUMES)]
        self.images = [torch.from_numpy(img)[None] for img, _ in pairs]
        self.labels = [torch.from_numpy(lbl.astype(np.uint8))[None] for _, lbl in pairs]
        self.patch, self.length = tuple(patch), length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        g = torch.Generator().manual_seed(SEED * 1_000_003 + index)
        v = int(torch.randint(len(self.images), (1,), generator=g))
        crop = [slice(None)]
        for full, side in zip(self.images[v].shape[1:], self.patch):
            start = int(torch.randint(full - side + 1, (1,), generator=g))
            crop.append(slice(start, start + side))
        return self.images[v][tuple(crop)].contiguous(), self.labels[v][tuple(crop)].contiguous()


class ImageCrops(Dataset):
    """uint8 images in RAM (8/7 of the crop a side) with class labels, randomly cropped, scaled and normalised."""

    def __init__(self, size, length: int, classes: int):
        from torchvision.transforms import v2

        g = torch.Generator().manual_seed(SEED)
        stored = tuple(int(s * 8 / 7) for s in size)
        self.images = torch.randint(0, 256, (16 * NUM_VOLUMES, 3, *stored), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, classes, (16 * NUM_VOLUMES,), generator=g)
        self.transform = v2.Compose([v2.RandomCrop(list(size)), v2.ToDtype(torch.float32, scale=True),
                                     v2.Normalize(MEAN, STD)])
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        i = index % len(self.images)
        return self.transform(self.images[i]), self.labels[i]


def synthetic_batches(name: str):
    """Batches forever from a DataLoader over the workload's synthetic data, a new epoch every ``epoch_steps``."""
    spec = SHAPES[name]
    length = spec["batch"] * spec["epoch_steps"]
    if len(spec["shape"]) == 4:
        dataset = VolumeCrops(spec["shape"][1:], length)
    else:
        dataset = ImageCrops(spec["shape"][1:], length, spec["classes"])
    loader = DataLoader(dataset, batch_size=spec["batch"], shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(SEED))
    while True:
        yield from loader


def count_flops(build, name: str) -> float:
    """The model's training FLOPs on one sample, on the meta device (nothing computed)."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model = build(SHAPES[name]["width"])[0]
        x = torch.empty(1, *SHAPES[name]["shape"])
    counter = FlopCounterMode(display=False)
    with counter:
        model(x).float().sum().backward()
    return float(counter.get_total_flops())


def train_step(model, loss_fn, optimizer, i: int, x, y) -> None:
    """One step as a function (``--step-fn``): its loss and graph go when it returns."""
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    if i == 0 or (i + 1) % LOG_EVERY == 0:
        loss.item()


class Collections:
    """Python's collections while ``counting``: how many of each generation, and their seconds."""

    def __init__(self) -> None:
        self.counting, self.began = False, 0.0
        self.counts, self.seconds = [0, 0, 0], 0.0
        gc.callbacks.append(self)

    def __call__(self, phase: str, info: dict) -> None:
        if not self.counting:
            return
        if phase == "start":
            self.began = time.perf_counter()
        else:
            self.counts[info["generation"]] += 1
            self.seconds += time.perf_counter() - self.began


def timed_steps(model, loss_fn, optimizer, batches, warmup: int, steps: int,
                step_fn: bool, collections: Collections | None = None) -> tuple[list[float], int, int]:
    """The steps' times after the warm-up, a batch's samples, and the minor page faults of the timed steps: each step
    written inline in the loop (``loss`` kept until the next step's forward replaces it), or a call of
    :func:`train_step`."""
    step_s, faults = [], 0
    for i in range(warmup + steps):
        if i == warmup:
            faults = -resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            if collections is not None:
                collections.counting = True
        start = time.perf_counter()
        x, y = next(batches)
        if step_fn:
            train_step(model, loss_fn, optimizer, i, x, y)
        else:
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            if i == 0 or (i + 1) % LOG_EVERY == 0:
                loss.item()
        if i >= warmup:
            step_s.append(time.perf_counter() - start)
    return step_s, x.shape[0], faults + resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", choices=tuple(HARNESS_SETTINGS))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--data", choices=("random", "synthetic"), default="random")
    parser.add_argument("--labels", choices=LABEL_DTYPES, default="int64",
                        help="with --data random: the label map's dtype (uint8: as the harness's; 3D only)")
    parser.add_argument("--mode", choices=("model", "train"), default="model")
    parser.add_argument("--flops", action="store_true", help="count the FLOPs on the meta device first")
    parser.add_argument("--step-fn", action="store_true",
                        help="each step a function: its loss and graph go when it returns (the loop keeps `loss` "
                             "until the next step's forward)")
    args = parser.parse_args()
    if args.mode == "train" and args.data != "synthetic":
        parser.error("--mode train takes its batches from a loader: add --data synthetic")
    if args.labels != "int64" and (args.data != "random" or len(SHAPES[args.model]["shape"]) != 4):
        parser.error(f"--labels {args.labels} is for --data random with a 3D label map (unet3d, unet3d-full); "
                     f"--data synthetic has the harness's uint8 label maps, and resnet50's class labels are int64")
    torch.manual_seed(SEED)
    build = resnet50 if args.model == "resnet50" else unet3d
    if args.flops:
        count_flops(build, args.model)
    model, loss_fn, optimizer = build(SHAPES[args.model]["width"])
    model.train()
    if args.data == "random":
        batch = random_batch(args.model, args.labels)
        batches = iter(lambda: batch, None)
    else:
        batches = synthetic_batches(args.model)
        if args.mode == "model":
            batch = next(batches)
            batches = iter(lambda: batch, None)
    collections = Collections()
    step_s, samples, faults = timed_steps(model, loss_fn, optimizer, batches, args.warmup, args.steps, args.step_fn,
                                          collections)
    collections.counting = False
    print(json.dumps({"samples_per_s": len(step_s) * samples / sum(step_s), "steps": len(step_s),
                      "window_s": sum(step_s), "minor_faults_per_step": faults / max(len(step_s), 1),
                      "window_collections": collections.counts, "window_gc_s": collections.seconds}))


if __name__ == "__main__":
    main()
