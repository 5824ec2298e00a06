"""Synthetic token batches for a language model (``synthetic: tokens``): what a tokenised text dataset yields."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


class RandomTokens(Dataset):
    """Samples of ``length`` token ids below ``vocab`` from a pool held in RAM, each a dict of ``input_ids``,
    ``attention_mask`` (all ones: packed sequences) and ``labels`` (the ids: a causal language model shifts them
    itself), as Hugging Face's data collators give them."""

    def __init__(self, length: int, vocab: int, items: int, pool: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, vocab, (pool, length), generator=g)
        self.mask = torch.ones(length, dtype=torch.int64)
        self.items = items

    def __len__(self) -> int:
        return self.items

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids = self.ids[index % len(self.ids)]
        return {"input_ids": ids, "attention_mask": self.mask, "labels": ids}
