"""A speech classifier as the SEResNet guide trains one: MONAI's SEResNet on log-spectrograms that the data loader
computes per item from waveforms (the guide's "4-8x" from loader workers is the cost of that per-item work).

No audio is downloaded: the waveforms are synthetic (chirps, tones and noise, two classes), held in RAM like decoded
clips, and each item is a random ~4 s crop with a random gain and fresh noise, then ``torch.stft`` -> log magnitude
-> per-frequency normalisation, all in the loader worker that serves it.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.utils.data import Dataset


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
    """(log-spectrogram, class) items computed per item from in-RAM synthetic waveforms.

    ``patch_size`` (handed by the harness, ``dataset_settings: {patch_size: data.patch_size}``) is the item's
    spatial shape, [frames] (spatial_dims 1: the bins are channels) or [bins, frames]: the frame count sets the
    clip length.
    """

    def __init__(self, patch_size=None, sample_rate: int = 16000, n_fft: int = 512, hop_length: int = 160,
                 num_clips: int = 32, num_classes: int = 2, spatial_dims: int = 1, seed: int = 0):
        frames = int(patch_size[-1]) if patch_size else 401
        if patch_size and spatial_dims == 2 and int(patch_size[0]) != n_fft // 2 + 1:
            raise ValueError(f"patch_size={list(patch_size)}: the frequency side must be n_fft // 2 + 1 = "
                             f"{n_fft // 2 + 1} (n_fft={n_fft})")
        self.samples = (frames - 1) * hop_length
        self.n_fft, self.hop_length, self.spatial_dims = n_fft, hop_length, spatial_dims
        self.num_classes, self.seed = num_classes, seed
        g = torch.Generator().manual_seed(seed)
        length = self.samples + sample_rate // 2  # clips a little longer than an item: random crops
        t = torch.arange(length) / sample_rate
        self.labels = torch.arange(num_clips) % num_classes
        clips = []
        for i in range(num_clips):
            f0 = 200.0 + 600.0 * float(torch.rand((), generator=g)) * (1 + int(self.labels[i]))
            sweep = f0 * (1 + 0.5 * t / t[-1])  # a chirp whose range tells the classes apart
            tone = torch.sin(2 * math.pi * torch.cumsum(sweep, 0) / sample_rate)
            clips.append(0.5 * tone + 0.1 * torch.randn(length, generator=g))
        self.clips = torch.stack(clips)
        self.window = torch.hann_window(n_fft)

    def __len__(self) -> int:
        return len(self.clips)

    def __getitem__(self, index: int):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        clip = self.clips[index % len(self.clips)]
        start = int(torch.randint(clip.numel() - self.samples + 1, (1,), generator=g))
        wave = clip[start:start + self.samples] * (0.5 + float(torch.rand((), generator=g)))
        wave = wave + 0.01 * torch.randn(self.samples, generator=g)
        spec = torch.stft(wave, self.n_fft, self.hop_length, window=self.window, return_complex=True).abs()
        spec = torch.log(spec + 1e-6)
        spec = (spec - spec.mean(dim=1, keepdim=True)) / (spec.std(dim=1, keepdim=True) + 1e-5)
        item = spec if self.spatial_dims == 1 else spec[None]
        return item.float().contiguous(), self.labels[index % len(self.clips)].long()
