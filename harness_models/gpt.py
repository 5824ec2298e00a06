"""A decoder-only language model built from its settings, no download: a GPT in the shape nanoGPT's ``model.py`` and
torchtitan's Llama use (pre-norm blocks of causal self-attention and an MLP, tied input and output embeddings),
attention through ``torch.nn.functional.scaled_dot_product_attention``, so that which SDPA backend runs (math,
memory-efficient, FlashAttention, cuDNN) is the caller's choice (``torch.nn.attention.sdpa_kernel``).

Also the training step the workload names (``lm_step``: next-token cross-entropy on a batch of ``input_ids``) and
the model's FLOPs counted by hand (``train_flops_per_token``), the rule MLPerf and nanoGPT's ``estimate_mfu``
use: 6 N plus the attention's 12 L d T, recomputation excluded.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        if width % heads:
            raise ValueError(f"gpt: width={width} is not a multiple of heads={heads}")
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.proj = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    """One transformer block: the unit activation checkpointing wraps (``checkpoint_units``)."""

    def __init__(self, width: int, heads: int, mlp_ratio: int = 4):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, mlp_ratio * width, bias=False), nn.GELU(),
                                 nn.Linear(mlp_ratio * width, width, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """``layers`` blocks of ``width`` channels and ``heads`` heads over a ``vocab``-token vocabulary, positions up
    to ``context``; ``forward(input_ids) -> logits [batch, length, vocab]``."""

    def __init__(self, vocab: int = 50304, context: int = 1024, layers: int = 12, heads: int = 12, width: int = 768):
        super().__init__()
        self.vocab, self.context, self.layers, self.heads, self.width = vocab, context, layers, heads, width
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tokens.weight  # tied, as GPT-2 and nanoGPT
        for m in self.modules():  # GPT-2's initialisation (nanoGPT's _init_weights): a first loss near ln(vocab)
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        t = input_ids.shape[1]
        if t > self.context:
            raise ValueError(f"gpt: a sequence of {t} tokens is longer than the model's context {self.context}")
        x = self.tokens(input_ids) + self.positions(torch.arange(t, device=input_ids.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    def params_for_flops(self) -> int:
        """N of the 6N rule: the weights a token is multiplied by (every Linear's, the tied output projection once);
        norms' scales and the position embeddings (a lookup) do no matmul. nanoGPT's ``get_num_params`` counts the
        norms too (0.1% of N here)."""
        return sum(m.weight.numel() for m in self.modules() if isinstance(m, nn.Linear))

    def block_params(self) -> int:
        """The matmul weights inside the blocks: what a full activation checkpoint of every block runs again."""
        return sum(m.weight.numel() for b in self.blocks for m in b.modules() if isinstance(m, nn.Linear))


# The shapes a size gives unless the workload's model node sets them: GPT-2 small (124M, nanoGPT's default)
# on a GPU; on a CPU a 2-layer, width-128 model: 4.3 MFLOP a token, 2.2 GFLOP a step of 4 x 128 tokens.
PRESETS = {"full": {"vocab": 50304, "layers": 12, "heads": 12, "width": 768},
           "smoke": {"vocab": 2048, "layers": 2, "heads": 4, "width": 128}}


def gpt(context=1024, size: str = "full", vocab: int | None = None, layers: int | None = None,
        heads: int | None = None, width: int | None = None) -> GPT:
    """The workload's builder (``workload=gpt``): a randomly initialised GPT whose positions reach ``context`` (a
    number, or the sequence as ``data.patch_size`` gives it, ``[length]``), its shape the size's ``PRESETS`` entry
    where an argument is None."""
    context = int(context[-1]) if isinstance(context, (list, tuple)) else int(context)
    shape = {**PRESETS.get(size, PRESETS["full"]),
             **{k: v for k, v in dict(vocab=vocab, layers=layers, heads=heads, width=width).items() if v is not None}}
    return GPT(context=context, **shape)


class PackedDocuments(torch.utils.data.Dataset):
    """Token rows as pre-training packs them: synthetic documents of random lengths (geometric, mean ``mean_doc``
    tokens), each ended by ``eos``, concatenated and cut into rows of ``length`` tokens, made once and held in RAM
    (``rows`` of them, served round-robin for ``items``); each item a dict of ``input_ids``, ``attention_mask`` (all
    ones: packed rows have no padding) and ``labels``. Documents attend across their boundaries, as in GPT-2's and
    nanoGPT's packing. A workload's dataset: ``workload.dataset._target_=harness_models.gpt.PackedDocuments``."""

    def __init__(self, length=128, vocab: int = 2048, mean_doc: int = 200, rows: int = 64, items: int = 100_000,
                 seed: int = 0):
        length = int(length[-1]) if isinstance(length, (list, tuple)) else int(length)
        g = torch.Generator().manual_seed(seed)
        eos, need, docs = vocab - 1, rows * length, []
        while sum(len(d) for d in docs) < need:
            size = int(torch.empty(1).geometric_(1.0 / mean_doc, generator=g).item())
            docs.append(torch.cat([torch.randint(0, eos, (size,), generator=g), torch.tensor([eos])]))
        self.ids = torch.cat(docs)[:need].view(rows, length)
        self.mask = torch.ones(length, dtype=torch.int64)
        self.items = items

    def __len__(self) -> int:
        return self.items

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids = self.ids[index % len(self.ids)]
        return {"input_ids": ids, "attention_mask": self.mask, "labels": ids}


def lm_step(model: nn.Module, batch) -> torch.Tensor:
    """Next-token cross-entropy: the logits at position t predict ``labels`` at t + 1 (what a Hugging Face causal
    language model computes from ``labels``)."""
    logits = model(batch["input_ids"])
    labels = batch.get("labels", batch["input_ids"])
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), labels[:, 1:].reshape(-1))


def train_flops_per_token(params: int, layers: int, width: int, length: int) -> float:
    """Model FLOPs per token by hand (MLPerf's and nanoGPT's rule): ``6 N + 12 L d T``, the forward's 2N + 4LdT and
    the backward's twice that; attention's QK^T and AV counted whole (no causal halving), as both count them."""
    return float(6 * params + 12 * layers * width * length)


def recompute_flops_per_token(block_params: int, last_params: int, layers: int, width: int, length: int) -> float:
    """What a full activation checkpoint of every block adds per token: each block's forward again, 2 N_blocks +
    4 L d T, less its last matmul (``last_params``: the MLP's output projection, ``layers`` of them), whose output
    no backward needs, so torch's non-reentrant checkpoint stops before it (its early stop). Hardware FLOPs =
    model FLOPs + this."""
    return float(2 * (block_params - last_params) + 4 * layers * width * length)
