"""Exports of the store's decided figures to the trackers teams already read: TensorBoard event files, MLflow runs on
a tracking server, Weights & Biases offline runs (``python -m harness export``, ``harness.commands.export``).

  figures    a sweep's rungs and a check's configs as params, metrics and tags (plain Python, no tracker)
  to_tb      TensorBoard run folders (``torch.utils.tensorboard``; extra ``.[tb]``)
  to_mlflow  a parent run and nested runs on a tracking server (``mlflow``; extra ``.[mlflow]``)
  to_wandb   W&B offline runs to ``wandb sync`` (``wandb``; extra ``.[wandb]``)

Each writer imports its tracker's library only when it runs, so the harness never needs one it does not use.
"""
