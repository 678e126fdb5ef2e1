"""The memory planner behind ``agentgym plan``: will a LoRA (or full) fine-tune fit these GPUs?

Pure arithmetic on the model's architecture: no weights, no GPU, no download. It reads a
trainer config (the trainer's sections plus ``plan:``) and prints, per GPU, each kind of
memory of the LoRA layout next to a full fine-tune of the same model. See docs/plan.md.

* :mod:`.architecture` -- model shapes, parameter and LoRA counts.
* :mod:`.specs` -- the planner's typed inputs (dtypes, layouts, GPUs).
* :mod:`.memory` -- bytes of each kind of tensor on one GPU of a pipeline stage.
* :mod:`.plans` -- :func:`plan_lora` / :func:`plan_full_finetune` and their assumptions.
* :mod:`.report` -- the text table and the JSON object.
* :mod:`.config` -- the ``plan:`` section and :func:`plan_inputs` (trainer config in).

Typical use::

    cfg = agentgym.load_config(TrainConfig, "configs/deepseek_v3_671b_48xh100.yaml")
    lora, full = plan_both(plan_inputs(cfg))
    print(format_plans(lora, full))
"""

from __future__ import annotations

from agentgym.trainers.plan.architecture import (
    Architecture,
    LoraSpec,
    ParameterCount,
    count_lora_parameters,
    count_parameters,
)
from agentgym.trainers.plan.config import PlanInputs, PlanSettings, plan_both, plan_inputs
from agentgym.trainers.plan.memory import GIB, LineItem
from agentgym.trainers.plan.plans import ASSUMPTIONS, Plan, plan_full_finetune, plan_lora
from agentgym.trainers.plan.report import format_plans, plans_to_json
from agentgym.trainers.plan.specs import (
    DTYPE_BYTES,
    Hardware,
    ParallelSpec,
    RolloutSpec,
    TrainSpec,
)

__all__ = [
    "ASSUMPTIONS",
    "DTYPE_BYTES",
    "GIB",
    "Architecture",
    "Hardware",
    "LineItem",
    "LoraSpec",
    "ParallelSpec",
    "ParameterCount",
    "Plan",
    "PlanInputs",
    "PlanSettings",
    "RolloutSpec",
    "TrainSpec",
    "count_lora_parameters",
    "count_parameters",
    "format_plans",
    "plan_both",
    "plan_full_finetune",
    "plan_inputs",
    "plan_lora",
    "plans_to_json",
]
