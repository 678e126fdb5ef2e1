"""The memory planner behind ``agentgym plan``: will a LoRA (or full) fine-tune fit these GPUs?

Pure arithmetic on the model's architecture: no weights, no GPU, no download, no torch at
import. It reads a trainer config (the trainer's sections plus ``plan:``) and prints, per
GPU, each kind of memory of the LoRA layout next to a full fine-tune of the same model.
See docs/plan.md. A tool beside the trainer, one layer above it: it takes only the public
names of :mod:`agentgym.trainers` (the policy losses, the mesh layout, the pipeline split).

* :mod:`.architecture` -- model shapes, parameter and LoRA counts.
* :mod:`.specs` -- the planner's typed inputs (dtypes, layouts, GPUs).
* :mod:`.memory` -- bytes of each kind of tensor on one GPU of a pipeline stage.
* :mod:`.plans` -- :func:`plan_lora` / :func:`plan_full_finetune` and their assumptions.
* :mod:`.report` -- the text table and the JSON object.
* :mod:`.config` -- the ``plan:`` section and :func:`plan_inputs` (trainer config in).
* :mod:`.train_config` -- :class:`PlanConfig`, the trainer config with ``plan:`` typed
  (loaded on first use: it imports the trainer's config, and torch with it).
* :mod:`.settings` -- the ``plan.workload``, ``plan.efficiency`` and ``plan.search``
  sub-sections.
* :mod:`.hardware` -- GPU specs as data (H100, H800, H200, H20, A100) and the cluster.
* :mod:`.workload` -- a step's episodes and their response-length distribution.
* :mod:`.flops` / :mod:`.links` -- work per token, and collective communication times.
* :mod:`.rollout_time` / :mod:`.train_time` / :mod:`.timing` -- the time model: seconds
  per step of the all-sync loop by phase (:func:`step_time`).
* :mod:`.disagg` -- disaggregated MoE rollout serving (MegaScale-Infer), on paper.
* :mod:`.search_memory` / :mod:`.search` / :mod:`.explain` -- ``agentgym plan --search``.
* :mod:`.calibration` -- published step times with their setups, and the model's.
* :mod:`.time_report` -- the step and search reports.
* :mod:`.timeout` -- ``distributed.timeout_s`` and the fault detector's thresholds
  against the planner's estimates (the rollout, the engine's first start).
* :mod:`.dry_run` -- a rank's dry run (``agentgym train --dry-run``) beside the planner.

Typical use::

    cfg = agentgym.load_config(PlanConfig, "configs/deepseek_v3_671b_48xh100.yaml")
    inputs = plan_inputs(cfg)
    lora, full = plan_both(inputs)
    print(format_plans(lora, full))
    print(format_step(step_time(step_spec(inputs))))
    print(format_search(search_layouts(inputs)))
"""

from __future__ import annotations

from agentgym import lazy_exports
from agentgym.plan.architecture import (
    Architecture,
    LoraSpec,
    ParameterCount,
    count_lora_parameters,
    count_parameters,
)
from agentgym.plan.calibration import FIGURES, Calibrated, Figure, calibrate
from agentgym.plan.config import (
    PlanInputs,
    PlanSettings,
    TimingInputs,
    plan_both,
    plan_inputs,
    plan_settings,
    step_spec,
)
from agentgym.plan.disagg import DisaggLayout, DisaggResult, best_disaggregated
from agentgym.plan.dry_run import RankCheck, dry_run_report, exit_status
from agentgym.plan.engine_memory import EngineMemory, engine_memory
from agentgym.plan.hardware import GPUS, Cluster, GpuSpec, gpu_spec
from agentgym.plan.memory import GIB, LineItem
from agentgym.plan.plans import (
    ASSUMPTIONS,
    Plan,
    plan_full_finetune,
    plan_lora,
)
from agentgym.plan.report import format_plans, plans_to_json
from agentgym.plan.search import (
    Layout,
    Scored,
    SearchResult,
    disaggregated_option,
    search_layouts,
)
from agentgym.plan.settings import Efficiency, SearchSettings, WorkloadSettings
from agentgym.plan.specs import (
    DTYPE_BYTES,
    Hardware,
    ParallelSpec,
    RolloutSpec,
    TrainSpec,
)
from agentgym.plan.time_report import format_search, format_step, search_to_dict
from agentgym.plan.timeout import (
    check_collective_timeout,
    check_detector,
    rollout_seconds,
    startup_seconds,
)
from agentgym.plan.timing import StepSpec, StepTime, step_time
from agentgym.plan.workload import Workload

#: loaded on first use: the trainer's config it extends imports torch
__getattr__, __dir__ = lazy_exports(__name__, {"PlanConfig": "agentgym.plan.train_config"})


__all__ = [
    "ASSUMPTIONS",
    "DTYPE_BYTES",
    "FIGURES",
    "GIB",
    "GPUS",
    "Architecture",
    "Calibrated",
    "Cluster",
    "DisaggLayout",
    "DisaggResult",
    "Efficiency",
    "EngineMemory",
    "Figure",
    "GpuSpec",
    "Hardware",
    "Layout",
    "LineItem",
    "LoraSpec",
    "ParallelSpec",
    "ParameterCount",
    "Plan",
    "PlanConfig",
    "PlanInputs",
    "PlanSettings",
    "RankCheck",
    "RolloutSpec",
    "Scored",
    "SearchResult",
    "SearchSettings",
    "StepSpec",
    "StepTime",
    "TimingInputs",
    "TrainSpec",
    "Workload",
    "WorkloadSettings",
    "best_disaggregated",
    "calibrate",
    "check_collective_timeout",
    "check_detector",
    "count_lora_parameters",
    "count_parameters",
    "disaggregated_option",
    "dry_run_report",
    "engine_memory",
    "exit_status",
    "format_plans",
    "format_search",
    "format_step",
    "gpu_spec",
    "plan_both",
    "plan_full_finetune",
    "plan_inputs",
    "plan_lora",
    "plan_settings",
    "plans_to_json",
    "rollout_seconds",
    "search_layouts",
    "search_to_dict",
    "startup_seconds",
    "step_spec",
    "step_time",
]
