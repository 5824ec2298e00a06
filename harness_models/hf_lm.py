"""Hugging Face causal language models built from a config (no download, no weights), the shapes the ``gpt2`` and
``llama`` workloads train: GPT-2 (``GPT2LMHeadModel``) and a Llama-style decoder (``LlamaForCausalLM``: RMSNorm,
rotary positions, SwiGLU, grouped-query attention), both with ``attn_implementation="sdpa"`` so that the SDPA
backend a run chooses is the one they call. The harness trains them through their own loss, ``model(**batch).loss``.
``pip install -e '.[hf]'`` installs transformers.
"""

from __future__ import annotations

# full: GPT-2 small (124M) at 1024 tokens; Llama-3.2-1B's shape (16 layers, width 2048, 32 heads, 8 KV heads,
# SwiGLU 8192, vocabulary 128256). smoke: each a 2-layer, width-128 model (a few GFLOP a step of 4 x 128 tokens).
GPT2_PRESETS = {"full": {"vocab": 50257, "layers": 12, "heads": 12, "width": 768},
                "smoke": {"vocab": 2048, "layers": 2, "heads": 4, "width": 128}}
LLAMA_PRESETS = {"full": {"vocab": 128256, "layers": 16, "heads": 32, "kv_heads": 8, "width": 2048, "mlp": 8192},
                 "smoke": {"vocab": 2048, "layers": 2, "heads": 4, "kv_heads": 2, "width": 128, "mlp": 384}}


def _shape(presets: dict, size: str, given: dict) -> dict:
    return {**presets.get(size, presets["full"]), **{k: v for k, v in given.items() if v is not None}}


def _length(context) -> int:
    return int(context[-1]) if isinstance(context, (list, tuple)) else int(context)


def gpt2(context=1024, size: str = "full", vocab: int | None = None, layers: int | None = None,
         heads: int | None = None, width: int | None = None):
    """``GPT2LMHeadModel(GPT2Config(...))``, randomly initialised; positions up to ``context`` (the sequence)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    s = _shape(GPT2_PRESETS, size, dict(vocab=vocab, layers=layers, heads=heads, width=width))
    config = GPT2Config(vocab_size=s["vocab"], n_positions=_length(context), n_layer=s["layers"], n_head=s["heads"],
                        n_embd=s["width"], bos_token_id=s["vocab"] - 1, eos_token_id=s["vocab"] - 1,
                        use_cache=False, attn_implementation="sdpa")
    return GPT2LMHeadModel(config)


def llama(context=2048, size: str = "full", vocab: int | None = None, layers: int | None = None,
          heads: int | None = None, kv_heads: int | None = None, width: int | None = None, mlp: int | None = None):
    """``LlamaForCausalLM(LlamaConfig(...))``, randomly initialised, untied embeddings as Llama's."""
    from transformers import LlamaConfig, LlamaForCausalLM

    s = _shape(LLAMA_PRESETS, size, dict(vocab=vocab, layers=layers, heads=heads, kv_heads=kv_heads, width=width,
                                         mlp=mlp))
    config = LlamaConfig(vocab_size=s["vocab"], hidden_size=s["width"], intermediate_size=s["mlp"],
                         num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                         num_key_value_heads=s["kv_heads"], max_position_embeddings=_length(context),
                         bos_token_id=0, eos_token_id=1, use_cache=False, attn_implementation="sdpa")
    return LlamaForCausalLM(config)
