"""Published RL step times, each with its setup, and the time model's figure for it.

:data:`FIGURES` lists public measurements of synchronous (on-policy) RL steps on large
MoE models: NeMo-RL's performance summary (v0.6, H100, BF16, Megatron training + vLLM
generation), verl's DeepSeek-671B benchmark (H20) and the seed's 671B LoRA step (Mind
Labs, 48 H800). Each :class:`Figure` rebuilds the run's setup as a
:class:`~agentgym.plan.timing.StepSpec` from what its source states (model,
GPUs, batch, sequence lengths, training and generation layouts, extra log-prob passes,
offloading) and fills what the source leaves out with one rule for all figures (a
150-token prompt for math datasets, an exponential response-length distribution, vLLM's
defaults). The efficiencies are the defaults of
:class:`~agentgym.plan.settings.Efficiency` for every figure: nothing is fitted
per figure. :func:`calibrate` models them all; docs/plan.md prints the table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agentgym.plan.architecture import Architecture, LoraSpec
from agentgym.plan.hardware import Cluster, gpu_spec
from agentgym.plan.settings import Efficiency
from agentgym.plan.specs import ParallelSpec, RolloutSpec
from agentgym.plan.timing import StepSpec, StepTime, step_time
from agentgym.plan.workload import Workload

DEEPSEEK_V3 = Architecture.from_config(
    {
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "num_hidden_layers": 61,
        "vocab_size": 129280,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "first_k_dense_replace": 3,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "num_attention_heads": 128,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
    }
)


def _qwen3_moe(hidden: int, layers: int, heads: int, inter: int, moe_inter: int) -> Architecture:
    return Architecture.from_config(
        {
            "model_type": "qwen3_moe",
            "hidden_size": hidden,
            "num_hidden_layers": layers,
            "vocab_size": 151936,
            "num_attention_heads": heads,
            "num_key_value_heads": 4,
            "head_dim": 128,
            "intermediate_size": inter,
            "moe_intermediate_size": moe_inter,
            "n_routed_experts": 128,
            "num_experts_per_tok": 8,
        }
    )


QWEN3_235B = _qwen3_moe(4096, 94, 64, 12288, 1536)
QWEN3_30B = _qwen3_moe(2048, 48, 32, 6144, 768)

#: prompt tokens assumed where a math dataset's prompt length is not published
MATH_PROMPT = 150


@dataclass(frozen=True)
class Figure:
    """One published measurement and the setup it was taken with.

    Attributes:
        name: short label.
        source: where it is published.
        setup: the setup in words, as the source states it.
        step_s: published seconds per step.
        tokens_per_s_per_gpu: published tokens/s/GPU (``None``: not published).
        extra: other published numbers (label -> value) shown next to the model's.
        build: the setup as a :class:`StepSpec`.
    """

    name: str
    source: str
    setup: str
    step_s: float
    tokens_per_s_per_gpu: float | None
    extra: dict[str, float]
    build: Callable[[Efficiency], StepSpec]


def _nemo(
    arch: Architecture,
    *,
    gpus: int,
    prompts: int,
    group: int,
    avg_seq: float,
    max_seq: int,
    gen_tp: int,
    tp: int,
    ep: int,
    pp: int,
    cp: int,
    checkpointing: bool,
) -> Callable[[Efficiency], StepSpec]:
    """A NeMo-RL GRPO run: full fine-tune in bf16, colocated vLLM, KL reference on."""

    def build(eff: Efficiency) -> StepSpec:
        response = avg_seq - MATH_PROMPT
        return StepSpec(
            arch=arch,
            mode="full",
            lora=None,
            # context parallelism splits each sequence's tokens like extra data parallelism
            parallel=ParallelSpec(tp=tp, ep=ep, pp=pp, dp=gpus // (tp * pp)),
            micro_batch_size=1,
            activation_checkpointing=checkpointing,
            base_dtype="bf16",
            rollout=RolloutSpec(
                tp=gen_tp,
                pp=1,
                dp=gpus // gen_tp,
                ep=gen_tp,
                max_num_seqs=256,
                max_model_len=max_seq,
                sleep_level=1,
            ),
            workload=Workload(
                episodes=prompts * group,
                group_size=group,
                prompt_tokens=MATH_PROMPT,
                response_tokens=response,
                max_response_tokens=max_seq - MATH_PROMPT,
                logprob_passes=2,  # previous-policy and reference log-probs
            ),
            cluster=Cluster(gpu_spec("h100"), gpus),
            eff=eff,
            offload_train_state=True,
        )

    del cp
    return build


def _verl_671b(eff: Efficiency) -> StepSpec:
    """verl's DeepSeek-V3 on 96 H20: GRPO, 96 prompts x 8, 3 mini-batches, KL loss."""
    return StepSpec(
        arch=DEEPSEEK_V3,
        mode="full",
        lora=None,
        parallel=ParallelSpec(tp=8, ep=8, pp=12, dp=1),
        micro_batch_size=2,
        activation_checkpointing=True,
        base_dtype="bf16",
        rollout=RolloutSpec(tp=32, pp=1, dp=3, ep=32, max_num_seqs=256, max_model_len=11680),
        workload=Workload(
            episodes=96 * 8,
            group_size=8,
            prompt_tokens=MATH_PROMPT,
            response_tokens=1960,
            max_response_tokens=1204 * 8,
            logprob_passes=2,  # old policy (3 mini-batches) and reference (KL loss)
            updates=3,
        ),
        cluster=Cluster(gpu_spec("h20"), 96),
        eff=eff,
        cuda_graphs=False,  # enforce_eager=True in the recipe
        offload_train_state=True,
    )


def _seed_671b(eff: Efficiency) -> StepSpec:
    """The seed's 671B LoRA step on 48 H800, with this project's 671B config's layout
    and workload (the seed publishes neither): see configs/deepseek_v3_671b_48xh100.yaml."""
    return StepSpec(
        arch=DEEPSEEK_V3,
        mode="lora",
        lora=LoraSpec(
            r=16,
            target_modules=("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"),
        ),
        parallel=ParallelSpec(tp=4, ep=8, pp=6, dp=2),
        micro_batch_size=1,
        activation_checkpointing=True,
        base_dtype="fp8",
        rollout=RolloutSpec(tp=8, pp=6, dp=1, ep=8, max_num_seqs=256, max_model_len=8192),
        workload=SEED_WORKLOAD,
        cluster=Cluster(gpu_spec("h800"), 48),
        eff=eff,
    )


#: the 671B config's workload (configs/deepseek_v3_671b_48xh100.yaml, plan.workload)
SEED_WORKLOAD = Workload(
    episodes=32 * 8,
    group_size=8,
    prompt_tokens=1024,
    response_tokens=4096,
    max_response_tokens=7168,
    conversations=2,
    env_seconds=60.0,
)

FIGURES: tuple[Figure, ...] = (
    Figure(
        "NeMo-RL DeepSeek-V3, 256 H100",
        "NeMo-RL v0.6 docs/about/performance-summary.md (H100 BF16)",
        "GRPO on-policy, 32 prompts x 16, mean sequence 701 of max 1536; vLLM TP32; "
        "Megatron TP1 EP16 PP16, full recompute, full fine-tune bf16",
        134.0,
        12.1,
        {},
        _nemo(
            DEEPSEEK_V3,
            gpus=256,
            prompts=32,
            group=16,
            avg_seq=701,
            max_seq=1536,
            gen_tp=32,
            tp=1,
            ep=16,
            pp=16,
            cp=1,
            checkpointing=True,
        ),
    ),
    Figure(
        "NeMo-RL DeepSeek-V3, 512 H100",
        "NeMo-RL v0.6 docs/about/performance-summary.md (H100 BF16)",
        "as above on 512 GPUs (mean sequence 697)",
        111.0,
        7.24,
        {},
        _nemo(
            DEEPSEEK_V3,
            gpus=512,
            prompts=32,
            group=16,
            avg_seq=697,
            max_seq=1536,
            gen_tp=32,
            tp=1,
            ep=16,
            pp=16,
            cp=1,
            checkpointing=True,
        ),
    ),
    Figure(
        "NeMo-RL Qwen3-235B-A22B, 128 H100",
        "NeMo-RL v0.6 docs/about/performance-summary.md (H100 BF16)",
        "GRPO on-policy, 16 prompts x 32, mean sequence 5,698 of max 8,192; vLLM TP16; "
        "Megatron TP2 CP2 EP16 PP8, full recompute, full fine-tune bf16",
        395.0,
        58.9,
        {},
        _nemo(
            QWEN3_235B,
            gpus=128,
            prompts=16,
            group=32,
            avg_seq=5698,
            max_seq=8192,
            gen_tp=16,
            tp=2,
            ep=16,
            pp=8,
            cp=2,
            checkpointing=True,
        ),
    ),
    Figure(
        "NeMo-RL Qwen3-235B-A22B, 256 H100",
        "NeMo-RL v0.6 docs/about/performance-summary.md (H100 BF16)",
        "as above on 256 GPUs (mean sequence 5,713)",
        312.0,
        37.4,
        {},
        _nemo(
            QWEN3_235B,
            gpus=256,
            prompts=16,
            group=32,
            avg_seq=5713,
            max_seq=8192,
            gen_tp=16,
            tp=2,
            ep=16,
            pp=8,
            cp=2,
            checkpointing=True,
        ),
    ),
    Figure(
        "NeMo-RL Qwen3-30B-A3B, 32 H100",
        "NeMo-RL v0.6 docs/about/performance-summary.md (H100 BF16)",
        "GRPO on-policy, 64 prompts x 32, mean sequence 3,203 of max 4,096; vLLM TP2; "
        "Megatron TP1 EP8, no recompute, full fine-tune bf16",
        192.0,
        1102.0,
        {},
        _nemo(
            QWEN3_30B,
            gpus=32,
            prompts=64,
            group=32,
            avg_seq=3203,
            max_seq=4096,
            gen_tp=2,
            tp=1,
            ep=8,
            pp=1,
            cp=1,
            checkpointing=False,
        ),
    ),
    Figure(
        "verl DeepSeek-V3, 96 H20",
        "verl docs/perf/dpsk.md and examples/grpo_trainer/run_deepseek671b_math_megatron_96gb.sh",
        "GRPO, 96 prompts x 8 in 3 mini-batches, KL loss, mean response 1,960 of max 9,632; "
        "vLLM TP32 eager; Megatron TP8 EP8 PP12, full recompute, offloaded optimizer",
        1700.0,
        None,
        {"rollout s": 1050.0, "training MFU": 0.19},
        _verl_671b,
    ),
    Figure(
        "seed: DeepSeek-V3 LoRA, 48 H800",
        "Mind Labs, 'Scaling All-Sync RL with DAPO and LoRA' (mindlabs.macaron.im)",
        "DAPO + LoRA, all-sync, 6 nodes; batch, lengths and layouts not published: this "
        "project's 671B config stands in (256 episodes of 2 conversations, 1,024 + 4,096 "
        "tokens each, 60 s env time)",
        5400.0,
        None,
        {},
        _seed_671b,
    ),
)


@dataclass(frozen=True)
class Calibrated:
    """A figure and the model's step for its setup."""

    figure: Figure
    model: StepTime

    @property
    def ratio(self) -> float:
        """Modelled over published seconds per step."""
        return self.model.seconds / self.figure.step_s


def calibrate(eff: Efficiency | None = None) -> list[Calibrated]:
    """Model every figure of :data:`FIGURES` with one set of efficiencies."""
    eff = eff or Efficiency()
    return [Calibrated(f, step_time(f.build(eff))) for f in FIGURES]
