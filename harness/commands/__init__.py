"""The edge: one module per command (each returns its exit code), the Hydra plumbing, the console."""
