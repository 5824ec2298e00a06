"""A training script as a user writes it, for the end-to-end comparison in ``benchmarks/overhead.py --as-users``.

    python benchmarks/user_script.py resnet50|unet3d [--steps 30] [--warmup 5]

It imports torch and the model's own library (torchvision or MONAI) and nothing of the harness: the same model,
batch, optimizer and loss that ``python -m harness run`` measures with the settings in ``HARNESS_SETTINGS``, one
batch kept in memory, the loss read at step 0 and every 10 steps (the harness's default logging), and its
throughput printed as the samples of the timed steps over the sum of their times (the window, as the harness
reports it). The last line of stdout is JSON.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

# What ``python -m harness run`` is given for the same training (its workload's settings at this size).
HARNESS_SETTINGS = {
    "resnet50": ["workload=resnet50", "size=full", "batch_size=8", "data.patch_size=[64,64]", "precision=32"],
    "unet3d": ["workload=unet3d", "size=smoke", "precision=32"],
}
LOG_EVERY = 10


def resnet50():
    from torchvision.models import resnet50 as tv_resnet50

    model = tv_resnet50(weights=None, num_classes=1000)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    x, y = torch.randn(8, 3, 64, 64), torch.randint(0, 1000, (8,))
    return model, torch.nn.CrossEntropyLoss(), optimizer, x, y


def unet3d():
    from monai.losses import DiceCELoss
    from monai.networks.nets import UNet

    model = UNet(spatial_dims=3, in_channels=1, out_channels=2, channels=(8, 16, 32, 64, 128), strides=(2, 2, 2, 2),
                 num_res_units=2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    x, y = torch.randn(2, 1, 32, 32, 32), torch.randint(0, 2, (2, 1, 32, 32, 32))
    return model, DiceCELoss(to_onehot_y=True, softmax=True), optimizer, x, y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", choices=("resnet50", "unet3d"))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    model, loss_fn, optimizer, x, y = {"resnet50": resnet50, "unet3d": unet3d}[args.model]()
    model.train()
    step_s = []
    for i in range(args.warmup + args.steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        if i == 0 or (i + 1) % LOG_EVERY == 0:
            loss.item()
        if i >= args.warmup:
            step_s.append(time.perf_counter() - start)
    print(json.dumps({"samples_per_s": len(step_s) * x.shape[0] / sum(step_s), "steps": len(step_s)}))


if __name__ == "__main__":
    main()
