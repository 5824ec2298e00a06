"""What each knob does to a workload's own step (``harness.workload.step.adapters``), and why one cannot act on it.
Torch-free: the parent asks with what the settings say (``applicability``), the child again with what the built model
says (a Hugging Face model is found only there, and a LightningModule's own zeroing and optimizer).

Acting on a user's step, as on the default one: ``precision`` (autocast around the step, the fp16 gradient scaler),
``accumulate_grad_batches`` (the loss divided, DDP's no_sync), ``compile`` (the model before the loop; a
LightningModule's forward), ``channels_last`` (the model's 4-D/5-D weights and the batch's 4-D/5-D floating tensors;
with neither the run is skipped in the child), ``activation_checkpointing`` (the model's checkpoint_units),
``optimizer.*`` (the harness's optimizer), ``log_every_n_steps`` (the loss read), the loader's knobs (the workload's
data through the harness's DataLoader), ``memory_cleanup_every_n_steps``, ``devices`` (DDP around the model; a
LightningModule's steps called through it), ``val.*`` (the pass over the workload's validation step,
``harness.workload.step.validation``, where it has one).
"""

from __future__ import annotations

from harness.names import target_of


def own_step_name(spec) -> str:
    """How messages name a workload's own step, from its settings."""
    if spec.lightning_module is not None:
        return f"workload.lightning_module={target_of(spec.lightning_module)!r}: training_step"
    return f"workload.step={target_of(spec.step)!r}"


def settings_reasons(cfg) -> list[str]:
    """Why knobs of ``cfg`` cannot act on its workload's own step, from the settings alone (the parent's question:
    the child asks again with what the built model says); none for the harness's own step or a loader-only run."""
    spec = cfg.workload
    if not spec.own_training or cfg.measure.mode == "loader":
        return []
    lightning = spec.lightning_module is not None
    return own_step_reasons(cfg, own_step_name(spec), own_optimizer=lightning, lightning=lightning,
                            validates=True if spec.val_step is not None else None if lightning else False)


def own_step_reasons(cfg, own: str, own_optimizer: bool = False, zeroes_grads_itself: str = "",
                     validates: bool | None = False, lightning: bool = False) -> list[str]:
    """Why knobs of ``cfg`` cannot act on the workload's own step ``own`` (how messages name it). ``validates``:
    whether the workload has a validation step (None: only the built model says, a LightningModule's)."""
    reasons = []
    if cfg.visualize_every_n_steps:
        reasons.append(f"visualize_every_n_steps={cfg.visualize_every_n_steps} writes a sample's input and the "
                       f"model's output; {own} returns only its loss")
    if cfg.val.every_n_steps and validates is False:
        how = "define validation_step(batch, batch_idx) in the module, or " if lightning else ""
        reasons.append(f"val.every_n_steps={cfg.val.every_n_steps} runs a validation step in eval mode; {own} has "
                       f"none the harness can call: {how}name workload.val_step._target_=mypkg.train.val_step "
                       "(val_step(model, batch) -> loss)")
    if own_optimizer:
        knobs = [f"optimizer.{k}={getattr(cfg.optimizer, k)}" for k in ("fused", "foreach")
                 if getattr(cfg.optimizer, k) is not None]
        reasons += [f"{knob} is passed to the harness's optimizer; {own} builds its own (configure_optimizers)"
                    for knob in knobs]
    if zeroes_grads_itself and not cfg.optimizer.zero_grad_set_to_none:
        reasons.append(zeroes_grads_itself)
    return reasons
