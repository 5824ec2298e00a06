"""A speech classifier as the SEResNet speech guide trains one: MONAI's SEResNet on log-spectrograms that the data
loader computes per item from audio files (the guide's "4-8x" from loader workers is the cost of that per-item work).

No audio is downloaded: the clips are synthetic (chirps whose range tells the two classes apart, plus noise), written
once as FLAC files (16 kHz, 16-bit, mono: the format LibriSpeech ships) to the data cache, and each item opens its
file and decodes a random ~4 s crop with ``soundfile`` (libsndfile, the decoder behind torchaudio's and librosa's
file loading), then a random gain and fresh noise, ``torch.stft`` -> log magnitude -> per-frequency normalisation,
all in the loader worker that serves it. ``source="memory"`` keeps the decoded waveforms in RAM instead (no file
read, no decode).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from pathlib import Path

import monai.networks.nets  # noqa: F401 - the warm launcher imports this module once, before any run forks
import numpy as np
import soundfile
import torch
from torch import nn
from torch.utils.data import Dataset

SOURCES = ("files", "memory")


def seresnet(spatial_dims: int = 1, in_channels: int = 257, num_classes: int = 2, layers=(3, 4, 6, 3)) -> nn.Module:
    """MONAI SEResNet-50 (randomly initialised, never pretrained). spatial_dims=1: frequency bins are the channels
    and the convolutions run along time; spatial_dims=2: the spectrogram is a one-channel image."""
    from monai.networks.nets import SEResNet50

    if spatial_dims not in (1, 2):
        raise ValueError(f"spatial_dims={spatial_dims!r} is not valid for the speech SEResNet: use 1 or 2")
    return SEResNet50(layers=tuple(layers), spatial_dims=spatial_dims, in_channels=in_channels,
                      num_classes=num_classes, pretrained=False)


def spectrogram_shape(seconds: float = 4.0, sample_rate: int = 16000, n_fft: int = 512, hop_length: int = 160,
                      spatial_dims: int = 1) -> list[int]:
    """The shape of one item: [n_fft // 2 + 1, frames] (spatial_dims 1) or [1, bins, frames] (2)."""
    shape = [n_fft // 2 + 1, int(round(seconds * sample_rate)) // hop_length + 1]
    return shape if spatial_dims == 1 else [1, *shape]


class SpeechSpectrograms(Dataset):
    """(log-spectrogram, class) items computed per item from FLAC files (or, ``source="memory"``, from waveforms in
    RAM).

    ``patch_size`` (handed by the harness, ``dataset_settings: {patch_size: data.patch_size}``) is the item's
    spatial shape, [frames] (spatial_dims 1: the bins are channels) or [bins, frames]: the frame count sets the
    clip length. The files go under ``cache_dir`` (else ``results_dir/.cache/datasets``), written once (each one
    atomically, a manifest of their sizes last) before any run measures, and rewritten if one is missing or torn.
    """

    def __init__(self, patch_size=None, sample_rate: int = 16000, n_fft: int = 512, hop_length: int = 160,
                 num_clips: int = 64, num_classes: int = 2, spatial_dims: int = 1, seed: int = 0,
                 source: str = "files", cache_dir: str | None = None, results_dir: str = "results"):
        frames = int(patch_size[-1]) if patch_size else 401
        if patch_size and spatial_dims == 2 and int(patch_size[0]) != n_fft // 2 + 1:
            raise ValueError(f"patch_size={list(patch_size)}: the frequency side must be n_fft // 2 + 1 = "
                             f"{n_fft // 2 + 1} (n_fft={n_fft})")
        if source not in SOURCES:
            raise ValueError(f"source={source!r} is not valid for the speech data set: use one of {SOURCES}")
        self.samples = (frames - 1) * hop_length
        self.n_fft, self.hop_length, self.spatial_dims = n_fft, hop_length, spatial_dims
        self.num_classes, self.seed, self.sample_rate = num_classes, seed, sample_rate
        self.length = self.samples + sample_rate // 2  # clips a little longer than an item: random crops
        self.labels = torch.arange(num_clips) % num_classes
        self.window = torch.hann_window(n_fft)
        self.clips, self.files = None, []
        if source == "memory":
            self.clips = self._synthesize(num_clips)
        else:
            root = Path(cache_dir or os.path.join(results_dir, ".cache", "datasets"))
            self.files = write_clips(root, self._synthesize, num_clips, self.length, sample_rate, seed)

    def _synthesize(self, num_clips: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed)
        t = torch.arange(self.length) / self.sample_rate
        clips = []
        for i in range(num_clips):
            f0 = 200.0 + 600.0 * float(torch.rand((), generator=g)) * (1 + int(self.labels[i]))
            sweep = f0 * (1 + 0.5 * t / t[-1])  # a chirp whose range tells the classes apart
            tone = torch.sin(2 * math.pi * torch.cumsum(sweep, 0) / self.sample_rate)
            clips.append(0.5 * tone + 0.1 * torch.randn(self.length, generator=g))
        return torch.stack(clips).clamp(-1.0, 1.0)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        i = index % len(self.labels)
        start = int(torch.randint(self.length - self.samples + 1, (1,), generator=g))
        if self.clips is not None:
            wave = self.clips[i, start:start + self.samples]
        else:  # the file opened and the crop decoded, as a speech loader reads its corpus
            data, _ = soundfile.read(self.files[i], start=start, stop=start + self.samples, dtype="float32")
            wave = torch.from_numpy(data)
        wave = wave * (0.5 + float(torch.rand((), generator=g)))
        wave = wave + 0.01 * torch.randn(self.samples, generator=g)
        spec = torch.stft(wave, self.n_fft, self.hop_length, window=self.window, return_complex=True).abs()
        spec = torch.log(spec + 1e-6)
        spec = (spec - spec.mean(dim=1, keepdim=True)) / (spec.std(dim=1, keepdim=True) + 1e-5)
        item = spec if self.spatial_dims == 1 else spec[None]
        return item.float().contiguous(), self.labels[i].long()


def write_clips(root: Path, synthesize, num_clips: int, length: int, sample_rate: int, seed: int) -> list[str]:
    """The clips as FLAC files under ``root`` (a folder per clip count, length, rate and seed): reused when every
    file is there at its recorded size, else the missing or torn ones written again, each to a temporary name and
    renamed, so that a reader never sees half a file. Returns their paths in clip order."""
    key = hashlib.sha256(json.dumps([num_clips, length, sample_rate, seed]).encode()).hexdigest()[:12]
    folder = root / f"flac-speech-{key}"
    paths = [folder / f"clip{i:04d}.flac" for i in range(num_clips)]
    manifest = folder / "manifest.json"
    try:
        sizes = json.loads(manifest.read_text())
    except (OSError, ValueError):
        sizes = {}
    bad = [i for i, p in enumerate(paths) if not p.is_file() or p.stat().st_size != sizes.get(p.name)]
    if bad:
        _check_space(root, len(bad) * length * 2)  # FLAC of 16-bit noise: at most about the raw PCM size
        folder.mkdir(parents=True, exist_ok=True)
        clips = synthesize(num_clips).numpy()
        for i in bad:
            tmp = paths[i].with_name(f".{paths[i].name}.{os.getpid()}.tmp")
            soundfile.write(tmp, (clips[i] * 32767).astype(np.int16), sample_rate, format="FLAC", subtype="PCM_16")
            os.replace(tmp, paths[i])
        sizes = {p.name: p.stat().st_size for p in paths}
        tmp = manifest.with_name(f".manifest.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(sizes))
        os.replace(tmp, manifest)
    return [str(p) for p in paths]


def _check_space(root: Path, need: int) -> None:
    """Refuse, naming the folder, its free space and the need, before writing clips that would not fit."""
    probe = root
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < need:
        raise OSError(f"data cache {root} has {free / 2**20:.1f} MiB free; the speech clips need up to "
                      f"{need / 2**20:.1f} MiB. Free space or set data.cache_dir to another disk")
