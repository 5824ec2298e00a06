"""A GPT-2-style causal language model from Hugging Face ``transformers``, built from a config (no download, no
weights): the harness trains it through its own loss, ``model(**batch).loss``, on batches of token ids, and reports
tokens/s. ``pip install -e '.[hf]'`` installs transformers.

Measured with its config file (``examples/conf/workload/gpt2_lm.yaml``)::

    python -m harness run --config-dir examples/conf workload=gpt2_lm
    python -m harness sweep --config-dir examples/conf workload=gpt2_lm +ladder=precision
    python -m harness sweep --config-dir examples/conf workload=gpt2_lm +ladder=batch
"""

from __future__ import annotations


def tiny_gpt2(vocab_size: int = 1000, context: int = 256, layers: int = 2, heads: int = 4, width: int = 128):
    """A GPT-2 of ``layers`` blocks and ``width`` channels, randomly initialised (``GPT2LMHeadModel(GPT2Config)``)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=vocab_size, n_positions=context, n_layer=layers, n_head=heads, n_embd=width,
                        bos_token_id=vocab_size - 1, eos_token_id=vocab_size - 1)
    return GPT2LMHeadModel(config)
