"""Model builders for the reference workloads.

Plain functions from typed arguments to ``torch.nn.Module``. Nothing here imports ``harness``:
a model is a model, whatever measures it.
"""
