"""What is measured: workloads, every knob's apply_*, data loaders and datasets, FLOPs."""
