"""The parallel layout of a run: ``distributed: {dp_shard, tp, ep, pp}`` as numbers (no torch).

One :class:`Layout` describes how ``dp_shard * ep * tp * pp`` processes split the work;
the trainer builds its device mesh from it (:mod:`.mesh`) and the planner sizes the same
layout (``agentgym plan``), so both read one config section and one set of rules:

* ``tp``: tensor parallelism. Attention heads (DeepSeek's latent-attention up-projections
  included), dense MLPs and shared experts are split column- then row-wise; the
  embedding and the LM head over the vocabulary.
* ``ep``: expert parallelism. ``ep`` groups of ``tp`` ranks take *different*
  micro-batches (they are data parallel for everything but the routed experts), and the
  routed experts are split over the ``ep * tp`` ranks of a stage: each holds
  ``n_routed_experts / (ep * tp)`` whole experts, and tokens travel to their experts and
  back by all-to-all (the tensor-parallel ranks hold different experts rather than
  slices of each, as torchtitan's ``ETP=1``).
* ``dp_shard``: FSDP2 data parallelism. Dense weights are sharded over the
  ``dp_shard * ep`` data-parallel ranks, expert weights over ``dp_shard``.
* ``pp``: pipeline parallelism. The decoder layers are cut into ``pp`` contiguous stages
  (earlier stages take the remainder), run with a 1F1B schedule.

Ranks are numbered with ``tp`` fastest, then ``ep``, ``dp_shard``, ``pp`` (the mesh's
dimension order ``(pp, dp_shard, ep, tp)``), so on GPUs a tensor-parallel group and an
expert group sit inside one node and a pipeline stage spans whole nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentgym import ConfigError
from agentgym.generation import stage_ranges

#: the mesh's dimension names, outermost first
MESH_DIMS = ("pp", "dp_shard", "ep", "tp")


@dataclass(frozen=True)
class Coords:
    """One rank's place on each mesh dimension."""

    pp: int
    dp_shard: int
    ep: int
    tp: int


@dataclass(frozen=True)
class Layout:
    """How the processes of a run split the model and the data (see the module docstring).

    Attributes:
        dp_shard: FSDP2 data-parallel shards.
        tp: tensor-parallel ranks.
        ep: expert-parallel groups (data parallel for the dense part).
        pp: pipeline stages.
    """

    dp_shard: int = 1
    tp: int = 1
    ep: int = 1
    pp: int = 1

    def __post_init__(self) -> None:
        for name in MESH_DIMS:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"distributed.{name} must be a positive integer, got {value!r}.")

    @classmethod
    def from_config(cls, section: Any) -> Layout:
        """The layout of a ``distributed`` config section (any object with the four
        attributes)."""
        return cls(dp_shard=section.dp_shard, tp=section.tp, ep=section.ep, pp=section.pp)

    # ------------------------------------------------------------------ sizes
    @property
    def world_size(self) -> int:
        """Processes the layout needs: ``dp_shard * tp * ep * pp``."""
        return self.dp_shard * self.tp * self.ep * self.pp

    @property
    def dp(self) -> int:
        """Data-parallel ranks (different micro-batches): ``dp_shard * ep``."""
        return self.dp_shard * self.ep

    @property
    def expert_split(self) -> int:
        """Ranks the routed experts of a stage are split over: ``ep * tp``."""
        return self.ep * self.tp

    @property
    def model_parallel(self) -> bool:
        """Any dimension beyond plain sharded data parallelism."""
        return self.tp > 1 or self.ep > 1 or self.pp > 1

    @property
    def is_default(self) -> bool:
        """Every dimension 1: the strategy shards over all ranks as it always did."""
        return self.world_size == 1

    def describe(self) -> str:
        """``dp_shard=2 x ep=2`` (the dimensions above 1, or ``1 process``)."""
        parts = [
            f"{n}={getattr(self, n)}"
            for n in ("dp_shard", "ep", "tp", "pp")
            if getattr(self, n) > 1
        ]
        return " x ".join(parts) if parts else "1 process"

    def planner_sizes(self) -> dict[str, int]:
        """This layout in the planner's terms (``plan.parallel``): ``tp``, ``pp``, ``dp``
        (data-parallel ranks: ``dp_shard * ep``) and ``ep`` (the GPUs the routed experts
        are split over: ``ep * tp``)."""
        return {"tp": self.tp, "ep": self.expert_split, "pp": self.pp, "dp": self.dp}

    # ------------------------------------------------------------------ checks
    def check_world(self, world_size: int) -> None:
        """Raise unless the layout uses exactly ``world_size`` processes."""
        if self.world_size != world_size:
            raise ConfigError(
                f"distributed: dp_shard * tp * ep * pp = {self.dp_shard} * {self.tp} * "
                f"{self.ep} * {self.pp} = {self.world_size} processes, but this run has "
                f"{world_size}: launch with --nproc {self.world_size} (times --nnodes), or "
                f"change the sizes so that their product is {world_size}."
            )

    def check_model(self, config: Any) -> None:
        """Raise when the model cannot be split this way (a Hugging Face config).

        Tensor parallelism needs the attention heads (and GQA's key/value heads) to
        divide by ``tp``; expert parallelism needs the routed experts to divide by
        ``ep * tp``; pipeline parallelism needs at least ``pp`` decoder layers and
        untied embeddings (the first and last stage would share the table).
        """

        def get(name: str, default: Any = None) -> Any:
            return getattr(config, name, default)

        heads = get("num_attention_heads") or 1
        if self.tp > 1 and heads % self.tp:
            raise ConfigError(f"distributed.tp={self.tp} must divide num_attention_heads={heads}.")
        kv = get("num_key_value_heads")
        if self.tp > 1 and get("kv_lora_rank") is None and kv and kv % self.tp:
            raise ConfigError(
                f"distributed.tp={self.tp} must divide num_key_value_heads={kv} "
                "(grouped-query attention splits whole key/value heads)."
            )
        experts = get("n_routed_experts") or get("num_local_experts") or 0
        if experts and experts % self.expert_split:
            raise ConfigError(
                f"routed experts are split over ep * tp = {self.ep} * {self.tp} = "
                f"{self.expert_split} ranks, which must divide n_routed_experts={experts}."
            )
        if self.pp > 1:
            stage_ranges(int(get("num_hidden_layers") or 1), self.pp)
            if get("tie_word_embeddings"):
                raise ConfigError(
                    "distributed.pp > 1 needs untied embeddings (tie_word_embeddings: the "
                    "first and the last stage would share one table); use tp/ep instead."
                )

    # ------------------------------------------------------------------ ranks
    def coords(self, rank: int) -> Coords:
        """Where ``rank`` sits on the mesh (``tp`` varies fastest)."""
        if not 0 <= rank < self.world_size:
            raise ConfigError(f"rank {rank} is outside a layout of {self.world_size} processes.")
        rest, tp = divmod(rank, self.tp)
        rest, ep = divmod(rest, self.ep)
        pp, dp_shard = divmod(rest, self.dp_shard)
        return Coords(pp=pp, dp_shard=dp_shard, ep=ep, tp=tp)

    def expert_index(self, rank: int) -> int:
        """``rank``'s place in its stage's expert group (``ep * tp`` ranks, tp fastest)."""
        c = self.coords(rank)
        return c.ep * self.tp + c.tp

    def experts_of(self, rank: int, num_experts: int) -> range:
        """The routed experts ``rank`` trains (all of them without expert parallelism)."""
        if self.expert_split == 1:
            return range(num_experts)
        per = num_experts // self.expert_split
        i = self.expert_index(rank)
        return range(i * per, (i + 1) * per)

    def dp_rank(self, rank: int) -> int:
        """Which share of the micro-batches ``rank`` trains on (``0 .. dp - 1``)."""
        c = self.coords(rank)
        return c.dp_shard * self.ep + c.ep

    def reports_metrics(self, rank: int) -> bool:
        """Whether ``rank``'s loss sums count: one rank per data-parallel share (the
        first tensor-parallel rank of the last pipeline stage), so that sums over all
        ranks count every micro-batch once."""
        c = self.coords(rank)
        return c.tp == 0 and c.pp == self.pp - 1


def check_mesh_critic(share_base: bool, layout: Layout) -> None:
    """What of a critic a device mesh runs: its adapter on the policy's base (a clear
    error for a separate critic model)."""
    mesh = f"distributed {layout.describe()}"
    if not share_base:
        raise ConfigError(
            f"a separate critic model (critic.share_base: false) does not run on a device "
            f"mesh ({mesh}): use the critic adapter on the policy's base "
            "(critic.share_base: true), or strategy fsdp2 / deepspeed without dp_shard/tp/ep/pp."
        )


def check_train_config(cfg: Any) -> None:
    """A trainer config's ``model.quantize`` against its layout, what a mesh does not run
    (a critic, router replay, LoRA dropout), and the ``distributed`` layout against the
    model it names, before anything is loaded: ``model.architecture`` (``config.json``
    fields), else the preset with its overrides. A model read from ``model.path`` alone
    is checked when the learner loads it."""
    layout = Layout.from_config(cfg.distributed)
    check_quantize_setting(
        getattr(cfg.model, "quantize", "none"),
        strategy=cfg.distributed.strategy,
        lora=cfg.lora.enabled,
        layout=layout,
    )
    if layout.is_default:
        return
    mesh = f"distributed {layout.describe()}"
    if cfg.algorithm.uses_critic:
        check_mesh_critic(cfg.critic.share_base, layout)
    if cfg.algorithm.router_replay:
        raise ConfigError(
            f"algorithm.router_replay does not run on a device mesh yet ({mesh}): set it to "
            "false, or drop dp_shard/tp/ep/pp."
        )
    if cfg.lora.enabled and cfg.lora.dropout > 0:
        raise ConfigError(
            f"lora.dropout must be 0 on a device mesh ({mesh}): ranks that share an "
            "activation would draw different dropout masks."
        )
    fields = dict(cfg.model.architecture or {})
    if not fields and cfg.model.preset is not None:
        from agentgym.generation import PRESETS

        fields = {**PRESETS.get(cfg.model.preset, {}), **(cfg.model.preset_overrides or {})}
    if fields:
        layout.check_model(_Fields(fields))


class _Fields:
    """A ``config.json`` dict read like a Hugging Face config (absent fields are None)."""

    def __init__(self, fields: dict[str, Any]) -> None:
        self.__dict__.update(fields)

    def __getattr__(self, name: str) -> Any:
        return None


#: ``model.quantize`` values (the frozen base's weight storage, :mod:`.quant`)
QUANT_KINDS = ("none", "int8", "fp8")


def check_quantize_setting(kind: str, *, strategy: str, lora: bool, layout: Layout) -> None:
    """Refuse a ``model.quantize`` that cannot run with the rest of the config: it needs
    LoRA, and one process or a device mesh (torchao's tensors are not DTensors: FSDP2
    leaves them whole, the expert split slices them; under tensor parallelism only the
    routed experts, which tp never splits, are quantized)."""
    if kind == "none":
        return
    if kind not in QUANT_KINDS:
        raise ConfigError(f"model.quantize must be one of {', '.join(QUANT_KINDS)}, got {kind!r}.")
    if not lora:
        raise ConfigError(
            f"model.quantize={kind} freezes the base: it needs lora.enabled=true (a quantized "
            "weight cannot be trained)."
        )
    if strategy != "none" and layout.is_default:
        raise ConfigError(
            f"model.quantize={kind} with distributed.strategy={strategy} over plain data "
            "parallelism is not wired (ZeRO and whole-model FSDP2 shard every weight): use "
            "a device mesh (distributed.dp_shard / ep / pp with strategy fsdp2), or one process."
        )
