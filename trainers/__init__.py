"""agentgym.trainers: all-sync DAPO with LoRA (see ``docs/trainer.md``).

What the layers above (benchmarks, the CLI) and users take from here; everything else
is internal to the package. Heavy modules (torch, transformers, peft) load on first
attribute access, so ``import agentgym.trainers`` is cheap.

* the DAPO run: :class:`DAPOTrainer` and its config :class:`TrainConfig` (sections in
  :mod:`.config`);
* the SFT warm start: :func:`run_sft`, :class:`SFTConfig` (the :mod:`.sft` package);
* LoRA on a model (:func:`apply_lora`, :func:`resolve_lora_targets`) and the model of a
  config's ``model:`` section (:func:`build_model_and_tokenizer`); models, tokenizers and
  engines themselves are the generation layer's (:mod:`agentgym.generation`);
* multi-process runs: :func:`under_torchrun`, :func:`torchrun_command`, :func:`shutdown`;
* what the tools beside the trainer take from it: the planner (:mod:`agentgym.plan`: the
  policy losses, the device-mesh :class:`Layout`, and the pipeline split is the generation layer's)
  and the server (:mod:`agentgym.serve`: a model from a ``model:`` section);
* measuring an engine against the learner: :func:`logprob_mismatch`;
* sub-packages with their own public names: :mod:`.sft`.
"""

from __future__ import annotations

import logging

from agentgym import lazy_exports

# Libraries that print on import what no run needs: torchao (a dependency of the
# quantized base, imported by peft) lists the GPU kernels it cannot load on this machine,
# and torch's pytree warns about enums torchao registers. Their loggers are set to
# errors before anything imports them; a user's own logging config can lower it again.
for _name in ("torchao", "torch.utils._pytree"):
    if logging.getLogger(_name).level == logging.NOTSET:
        logging.getLogger(_name).setLevel(logging.ERROR)

#: public name -> the module that defines it (imported on first use)
_LAZY = {
    # the DAPO run and its config
    "DAPOTrainer": "agentgym.trainers.loop",
    "TrainConfig": "agentgym.trainers.config",
    "check_launch": "agentgym.trainers.config",
    "EnvSpec": "agentgym.trainers.config",
    "LoraSettings": "agentgym.trainers.config",
    "ModelConfig": "agentgym.trainers.config",
    "RolloutConfig": "agentgym.trainers.config",
    "Learner": "agentgym.trainers.learner",
    # what a distribution backend implements (the learner's strategy protocol)
    "Strategy": "agentgym.trainers.strategy",
    "engine_placement": "agentgym.trainers.engine_check",
    # one rank of a launch, run here on fake tensors (agentgym train --dry-run)
    "dry_run_rank": "agentgym.trainers.dry_run",
    "RankFigures": "agentgym.trainers.dry_run",
    "refuse_unservable": "agentgym.trainers.engine_check",
    "env_corpus": "agentgym.trainers.env_setup",
    "env_kwargs": "agentgym.trainers.env_setup",
    "evaluate_async": "agentgym.trainers.evaluation",
    "eval_table": "agentgym.trainers.evaluation",
    "read_jsonl": "agentgym.trainers.logging",
    # a run folder holds one run (agentgym train / sft check it before writing)
    "prepare_run_folder": "agentgym.trainers.run_folder",
    "clean_failed_start": "agentgym.trainers.run_folder",
    "folder_state": "agentgym.trainers.run_folder",
    "has_checkpoint": "agentgym.trainers.run_folder",
    # A*PO's value stage (agentgym apo-values)
    "compute_apo_values": "agentgym.trainers.apo",
    # the SFT stage
    "SFTConfig": "agentgym.trainers.sft",
    "run_sft": "agentgym.trainers.sft",
    # LoRA on a model, and a model from the `model:` section
    "apply_lora": "agentgym.trainers.models",
    "build_model_and_tokenizer": "agentgym.trainers.models",
    "resolve_lora_targets": "agentgym.trainers.models",
    # training batches and MoE router replay (benchmarks measure them)
    "Sample": "agentgym.trainers.batch",
    "make_microbatches": "agentgym.trainers.batch",
    # SFT's token rows and the learning-rate schedules (one home each, every loop's)
    "token_rows": "agentgym.trainers.token_rows",
    "length_groups": "agentgym.trainers.token_rows",
    "packed_rows": "agentgym.trainers.token_rows",
    "pack_rows": "agentgym.trainers.token_rows",
    "Packed": "agentgym.trainers.token_rows",
    "lr_at": "agentgym.trainers.schedule",
    "SCHEDULES": "agentgym.trainers.schedule",
    "RoutingReplay": "agentgym.trainers.router_replay",
    "logprob_mismatch": "agentgym.trainers.mismatch",
    "flat": "agentgym.trainers.router_replay",
    # engines (also in agentgym.generation)
    # the policy losses by name and the device mesh (the planner sizes the same runs)
    "POLICY_LOSSES": "agentgym.trainers.algorithm",
    "Layout": "agentgym.trainers.parallel",
    # several processes
    "under_torchrun": "agentgym.trainers.distributed",
    "torchrun_command": "agentgym.trainers.distributed",
    "shutdown": "agentgym.trainers.distributed",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = sorted(_LAZY)
