"""A DETR-style detector as the DETR guide trains one, with what makes DETR slow: a ResNet-50 backbone, a
6 + 6 layer transformer (d_model 256) with 100 object queries, Hungarian matching of queries to boxes on the host
(scipy) every step, L1 + GIoU box losses and class cross-entropy; data with small boxes and the guide's
augmentations (CLAHE, motion blur) as switches, computed per item in the loader.

No weights are downloaded (``weights=None``) and no images either: images are synthetic (textured backgrounds held in
RAM as encoded JPEG files, decoded per item as a loader decodes the files it reads, with small bright or dark objects
pasted per item), one gray uint8 channel repeated to the model's three.

The augmentations are the operators albumentations runs: OpenCV's CLAHE (``cv2.createCLAHE(clipLimit=2.0,
tileGridSize=(8, 8)).apply``, on the gray channel, as albumentations applies it to a one-channel image; an RGB
image would add its LAB round trip) and a motion blur of a normalised line kernel through ``cv2.filter2D``, both on
the uint8 image before it becomes a normalised float tensor. They are training augmentations: the workload's
validation dataset switches them off (``val_dataset`` in conf/workload/detr.yaml).

Threads: the module sets ``cv2.setNumThreads(0)`` on import, so OpenCV runs each call on the calling thread, in the
loader workers (which import or inherit this module) and in the main process. Parallelism comes from the
DataLoader's workers; OpenCV's own pool in every worker would put num_workers x cores threads on the CPUs. This is
what detection trainers do (YOLOv5 and Ultralytics at import, MMDetection's ``setup_multi_processes``, the
albumentations advice for DataLoader workers), so the augmentations cost here what they cost there.

The model returns ONE tensor per batch, [B, queries, num_classes + 1 + 4]: class logits (the last class is "no
object") then boxes (cx, cy, w, h in 0..1). Targets are [B, max_boxes, 5] (class, cx, cy, w, h), padded with
class -1, so that batches collate and move to the device as plain tensors.
"""

from __future__ import annotations

import cv2
import numpy as np
import scipy.optimize  # noqa: F401 - the warm launcher imports this module once, before any run forks
import torch
import torch.nn.functional as F
import torchvision.models  # noqa: F401 - the warm launcher imports this module once, before any run forks
import torchvision.ops  # noqa: F401 - the warm launcher imports this module once, before any run forks
from torch import nn
from torch.utils.data import Dataset

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
BLUR_SIZES = (3, 5, 7, 9)  # the motion blur's line length, drawn per item (odd, as albumentations' blur_limit)
JPEG_QUALITY = 95  # the backgrounds' encoding: a photo's JPEG, decoded per item
BACKBONES = ("resnet18", "resnet34", "resnet50", "resnet101")  # the torchvision ResNets DETR's trunk may be

# OpenCV's own thread pool off (0: its functions run on the calling thread), in this process and in the loader
# workers that import or inherit this module: each worker is already one of num_workers processes sharing the CPUs,
# and a pool per worker would put num_workers x cores threads on them. Detection pipelines do the same (YOLOv5 and
# Ultralytics at import, MMDetection's setup_multi_processes, albumentations' advice for DataLoader workers).
cv2.setNumThreads(0)


class MLP(nn.Module):
    def __init__(self, dims: list[int]):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x) if i == len(self.layers) - 1 else F.relu(layer(x))
        return x


class DETR(nn.Module):
    """ResNet-50 (weights=None) -> 1x1 projection to d_model -> nn.Transformer with learned positions and queries.
    ``backbone`` names another torchvision ResNet (a smaller model for a CPU's size of a ladder; DETR's is
    ResNet-50)."""

    def __init__(self, num_classes: int = 2, num_queries: int = 100, d_model: int = 256, nhead: int = 8,
                 num_encoder_layers: int = 6, num_decoder_layers: int = 6, dim_feedforward: int = 2048,
                 dropout: float = 0.1, backbone: str = "resnet50"):
        super().__init__()
        if backbone not in BACKBONES:
            raise ValueError(f"DETR backbone={backbone!r} is not one of {', '.join(BACKBONES)}")
        trunk = getattr(torchvision.models, backbone)(weights=None)
        self.backbone = nn.Sequential(*list(trunk.children())[:-2])  # stride 32, 2048 channels (ResNet-50)
        self.input_proj = nn.Conv2d(trunk.fc.in_features, d_model, kernel_size=1)
        self.transformer = nn.Transformer(d_model, nhead, num_encoder_layers, num_decoder_layers, dim_feedforward,
                                          dropout, batch_first=True)
        self.query_pos = nn.Parameter(torch.rand(num_queries, d_model))
        self.row_embed = nn.Parameter(torch.rand(64, d_model // 2))  # up to 64 x 32 = 2048 pixels a side
        self.col_embed = nn.Parameter(torch.rand(64, d_model // 2))
        self.class_embed = nn.Linear(d_model, num_classes + 1)
        self.bbox_embed = MLP([d_model, d_model, d_model, 4])

    def forward(self, x):
        features = self.input_proj(self.backbone(x))
        b, d, h, w = features.shape
        pos = torch.cat([self.col_embed[:w].unsqueeze(0).expand(h, -1, -1),
                         self.row_embed[:h].unsqueeze(1).expand(-1, w, -1)], dim=-1).flatten(0, 1)
        src = features.flatten(2).transpose(1, 2) + pos
        hs = self.transformer(src, self.query_pos.unsqueeze(0).expand(b, -1, -1))
        return torch.cat([self.class_embed(hs), self.bbox_embed(hs).sigmoid()], dim=-1)


def box_xyxy(boxes: torch.Tensor) -> torch.Tensor:
    from torchvision.ops import box_convert

    return box_convert(boxes, "cxcywh", "xyxy")


def pairwise_giou(boxes1: torch.Tensor, boxes2: torch.Tensor) -> torch.Tensor:
    """Generalized IoU of every box of ``boxes1`` [B, N, 4] with every box of ``boxes2`` [B, M, 4] (xyxy), per batch
    entry: [B, N, M]. The arithmetic of torchvision's ``generalized_box_iou`` step by step (so each value is the one
    it gives for one image), over a batch: older torchvision takes [N, 4] boxes only."""
    area1 = (boxes1[..., 2] - boxes1[..., 0]) * (boxes1[..., 3] - boxes1[..., 1])
    area2 = (boxes2[..., 2] - boxes2[..., 0]) * (boxes2[..., 3] - boxes2[..., 1])
    lt = torch.max(boxes1[..., None, :2], boxes2[..., None, :, :2])
    rb = torch.min(boxes1[..., None, 2:], boxes2[..., None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    union = area1[..., None] + area2[..., None, :] - inter
    iou = inter / union
    lti = torch.min(boxes1[..., None, :2], boxes2[..., None, :, :2])
    rbi = torch.max(boxes1[..., None, 2:], boxes2[..., None, :, 2:])
    whi = (rbi - lti).clamp(min=0)
    areai = whi[..., 0] * whi[..., 1]
    return iou - (areai - union) / areai


class HungarianLoss(nn.Module):
    """DETR's set loss: queries matched one-to-one to target boxes (scipy.optimize.linear_sum_assignment on the
    host, per image, on costs computed for the whole batch on the device), then class cross-entropy over every
    query (no-object weighted ``eos_coef``) plus L1 and GIoU over the matched boxes; weights as DETR's (class 1,
    L1 5, GIoU 2)."""

    def __init__(self, num_classes: int = 2, cost_class: float = 1.0, cost_bbox: float = 5.0, cost_giou: float = 2.0,
                 eos_coef: float = 0.1):
        super().__init__()
        self.num_classes = num_classes
        self.cost_class, self.cost_bbox, self.cost_giou = cost_class, cost_bbox, cost_giou
        weight = torch.ones(num_classes + 1)
        weight[-1] = eos_coef
        self.register_buffer("class_weight", weight)

    @torch.no_grad()
    def match(self, logits: torch.Tensor, boxes: torch.Tensor, targets: torch.Tensor):
        """(image, query, target row) index tensors of the optimal assignment of each image.

        The costs of every query against every target slot of every image are computed on the device at once and
        come to the host in ONE copy, each slot's validity riding along as an extra row: asking per image (its valid
        rows, its costs, its row indices) waits for the device three times an image, ~100 times a step at batch 36.
        """
        from scipy.optimize import linear_sum_assignment

        prob = logits.float().softmax(-1)  # [B, Q, classes + 1]
        valid = targets[..., 0] >= 0  # [B, T]
        # padding slots get a harmless class and box (their columns are dropped on the host before matching)
        classes = torch.where(valid, targets[..., 0], 0).long()
        tboxes = torch.where(valid[..., None], targets[..., 1:].float(), 0.5)
        out_boxes = boxes.float()
        class_prob = prob.gather(2, classes[:, None, :].expand(-1, prob.shape[1], -1))  # [B, Q, T]
        cost = (-self.cost_class * class_prob + self.cost_bbox * torch.cdist(out_boxes, tboxes, p=1)
                - self.cost_giou * pairwise_giou(box_xyxy(out_boxes), box_xyxy(tboxes)))
        packed = torch.cat([cost, valid[:, None, :].to(cost.dtype)], dim=1).cpu()  # [B, Q + 1, T]: the one copy
        num_queries = cost.shape[1]
        images, queries, rows = [], [], []
        for i in range(len(packed)):
            columns = torch.nonzero(packed[i, num_queries] > 0).flatten()
            if columns.numel() == 0:
                continue
            q, t = linear_sum_assignment(packed[i, :num_queries, columns].numpy())
            images.append(torch.full((len(q),), i, dtype=torch.long))
            queries.append(torch.as_tensor(q, dtype=torch.long))
            rows.append(columns[torch.as_tensor(t, dtype=torch.long)])
        if not images:
            empty = torch.zeros(0, dtype=torch.long)
            return empty, empty, empty
        return torch.cat(images), torch.cat(queries), torch.cat(rows)

    def forward(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        from torchvision.ops import generalized_box_iou_loss

        logits, boxes = output[..., : self.num_classes + 1], output[..., self.num_classes + 1:]
        image, query, row = torch.stack(self.match(logits, boxes, targets)).to(output.device)  # one copy to the device
        classes = torch.full(logits.shape[:2], self.num_classes, dtype=torch.long, device=output.device)
        classes[image, query] = targets[image, row, 0].long()
        loss = F.cross_entropy(logits.float().transpose(1, 2), classes, weight=self.class_weight)
        n = max(int(image.numel()), 1)
        matched, wanted = boxes[image, query].float(), targets[image, row, 1:].float()
        loss = loss + self.cost_bbox * F.l1_loss(matched, wanted, reduction="sum") / n
        giou = generalized_box_iou_loss(box_xyxy(matched), box_xyxy(wanted), reduction="sum")
        return loss + self.cost_giou * giou / n


# ------------------------------------------------------------------------------------------
# data


def clahe(gray: np.ndarray, clip_limit: float = 2.0, tiles: int = 8) -> np.ndarray:
    """Contrast-limited adaptive histogram equalisation of a uint8 image: OpenCV's, as albumentations' ``CLAHE``
    calls it on a one-channel image (``cv2.createCLAHE(clipLimit, tileGridSize).apply``)."""
    return cv2.createCLAHE(clipLimit=clip_limit, tileGridSize=(tiles, tiles)).apply(gray)


def motion_kernel(size: int, angle: float) -> np.ndarray:
    """A [size, size] float32 kernel: a line of length ``size - 1`` through the centre at ``angle`` degrees (0: along
    a row, 90: along a column; ``size`` pixels there, fewer on a slant), its pixels weighted equally to sum to 1,
    drawn as albumentations' ``MotionBlur`` draws its line (points along it, rounded to pixels)."""
    if size < 3 or size % 2 == 0:
        raise ValueError(f"motion blur size={size} is not valid: use an odd number of pixels, 3 or more")
    kernel = np.zeros((size, size), dtype=np.float32)
    t = np.linspace(-(size // 2), size // 2, 2 * size)
    rad = np.deg2rad(angle)
    cols = np.clip(np.round(size // 2 + np.cos(rad) * t), 0, size - 1).astype(int)
    rows = np.clip(np.round(size // 2 + np.sin(rad) * t), 0, size - 1).astype(int)
    kernel[rows, cols] = 1.0
    return kernel / kernel.sum()


def motion_blur(image: np.ndarray, size: int, angle: float) -> np.ndarray:
    """A uint8 image blurred along a line of ``size`` pixels' length at ``angle`` degrees: ``cv2.filter2D`` with
    :func:`motion_kernel`, as albumentations' ``MotionBlur`` applies it (same depth out, borders reflected)."""
    return cv2.filter2D(image, -1, motion_kernel(size, angle))


class SyntheticDetection(Dataset):
    """Images with small objects and their boxes, CLAHE and motion blur applied per item when switched on.

    Each item decodes its background from a three-channel JPEG (``cv2.imdecode``, what ``cv2.imread`` does after the
    read: the decode an RGB file costs a loader) and keeps its first channel (the backgrounds are gray).
    ``patch_size`` ([H, W], handed by the harness: ``dataset_settings: {patch_size: data.patch_size}``) is the image
    size. Objects are 1-6% of the side (the guide's tiny objects), ``min_boxes``..``max_boxes`` per image.
    """

    def __init__(self, patch_size=(512, 512), num_classes: int = 2, max_boxes: int = 20, min_boxes: int = 1,
                 clahe: bool = True, motion_blur: bool = True, num_backgrounds: int = 8, seed: int = 0):
        self.size = tuple(int(s) for s in patch_size)
        self.num_classes, self.max_boxes, self.min_boxes = num_classes, max_boxes, min_boxes
        self.clahe, self.motion_blur, self.seed = clahe, motion_blur, seed
        rng = np.random.default_rng(seed)
        h, w = self.size
        coarse = rng.integers(40, 160, size=(num_backgrounds, 1, h // 8 + 1, w // 8 + 1)).astype(np.float32)
        smooth = F.interpolate(torch.from_numpy(coarse), size=(h, w), mode="bilinear", align_corners=False)
        grain = torch.from_numpy(rng.normal(0, 6, (num_backgrounds, h, w)).astype(np.float32))
        backgrounds = (smooth[:, 0] + grain).clamp(0, 255).to(torch.uint8).numpy()
        self.encoded = [cv2.imencode(".jpg", np.repeat(b[:, :, None], 3, axis=2),
                                     [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])[1] for b in backgrounds]
        self.mean = torch.tensor(MEAN).view(3, 1, 1)
        self.std = torch.tensor(STD).view(3, 1, 1)

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int):
        rng = np.random.default_rng(self.seed * 1_000_003 + index)
        h, w = self.size
        decoded = cv2.imdecode(self.encoded[index % len(self.encoded)], cv2.IMREAD_COLOR)
        gray = np.ascontiguousarray(decoded[:, :, 0])
        target = torch.full((self.max_boxes, 5), -1.0)
        for k in range(int(rng.integers(self.min_boxes, self.max_boxes + 1))):
            bh, bw = (max(2, int(s * rng.uniform(0.01, 0.06))) for s in (h, w))
            y, x = int(rng.integers(0, h - bh)), int(rng.integers(0, w - bw))
            cls = int(rng.integers(self.num_classes))
            gray[y:y + bh, x:x + bw] = 230 if cls % 2 == 0 else 15
            target[k] = torch.tensor([cls, (x + bw / 2) / w, (y + bh / 2) / h, bw / w, bh / h])
        if self.clahe:
            gray = clahe(gray)
        if self.motion_blur:
            gray = motion_blur(gray, int(rng.choice(BLUR_SIZES)), float(rng.uniform(0, 180)))
        image = torch.from_numpy(gray).float().div(255).expand(3, h, w)
        return ((image - self.mean) / self.std).contiguous(), target
