"""What ``agentgym serve`` serves: one base model and its LoRA adapters, by name.

:class:`ServedModels` holds the base model (a local Hugging Face directory or a built-in
preset) and any number of peft LoRA adapters loaded on top of it, each served under its
own name as vLLM's ``--lora-modules`` does: a request's ``model`` picks the base or an
adapter. Adapters can be added and removed while the server runs.

Generation goes through the trainer's own machinery: per served name (and per prompt
kind: chat, or raw text for ``/v1/completions``) an
:class:`~agentgym.generation.HFEngine` over the shared model and a
:class:`~agentgym.generation.BatchingPolicy` that gathers concurrent requests into
one ``generate`` call, exactly as the trainer's rollouts are batched. All of that runs on
one *engine thread* with its own asyncio loop: every torch operation of the server
happens on that thread (two threads running torch compete for the same cores with two
OpenMP teams, see the engines' docs), and the HTTP loop stays free to accept requests,
stream and notice disconnects while the model computes. A batch serves one adapter; the
engine thread switches adapters between batches (``set_adapter``; the base model runs
with the adapters disabled).

Log-probs (when a request asks for them) are computed by one extra forward pass over the
prompt and the reply: the model's own distribution at temperature 1, before top-p, as
vLLM reports them by default; the top alternatives come from the same pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from agentgym import Completion, ConfigError, Message, SamplingParams
from agentgym.generation import BatchingPolicy, HFEngine, HFEngineOptions, encode_prompt
from agentgym.serve.protocol import APIError, TokenLogprob
from agentgym.serve.weights import served_dtype

T = TypeVar("T")

#: prompt kinds: chat messages through the chat template, or raw text as it is
CHAT, TEXT = "chat", "text"


class RawTextTokenizer:
    """The model's tokenizer, except that its "chat template" is the prompt text itself.

    ``/v1/completions`` prompts are plain text, while the engines encode prompts through
    the chat template; a request of that kind is one user message holding the text, and
    this wrapper renders it unchanged. Everything else is the wrapped tokenizer's.
    """

    #: a template string of its own, so prompt caches keyed by template stay apart
    chat_template = "{{ messages[0]['content'] }}"

    def __init__(self, tokenizer: Any) -> None:
        self.inner = tokenizer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner(*args, **kwargs)

    def __len__(self) -> int:
        return len(self.inner)

    def apply_chat_template(self, messages: Sequence[dict[str, str]], **_: Any) -> str:
        return "".join(m["content"] for m in messages)


@dataclass(frozen=True)
class ServedModel:
    """One entry of ``/v1/models``: a name, and the adapter path (``None``: the base)."""

    name: str
    adapter_path: str | None = None


class ServedModels:
    """The base model and its adapters, generating on one engine thread.

    Args:
        model: the base causal LM (not a peft model).
        tokenizer: its tokenizer (with a chat template).
        base_name: the name the base model is served under.
        max_model_len: the context length: prompt plus reply tokens; a longer request is
            refused (default: the model's ``max_position_embeddings``).
        max_batch: most requests per ``generate`` call.
        gather_window_s: how long a batch waits for more requests after the last arrival.
        options: the HF engine's decode options.
        seed: the engines' fallback seed for requests without one.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        base_name: str,
        max_model_len: int | None = None,
        max_batch: int = 64,
        gather_window_s: float = 0.005,
        options: HFEngineOptions | None = None,
        seed: int = 0,
    ) -> None:
        limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        self.max_model_len = int(max_model_len or limit or 4096)
        if limit and self.max_model_len > limit:
            raise ConfigError(
                f"--max-model-len {self.max_model_len} is longer than the model's "
                f"max_position_embeddings ({limit}); use at most {limit}."
            )
        self.base = model
        self.model = model  # a PeftModel over the base once an adapter is loaded
        self.tokenizer = tokenizer
        self.raw_tokenizer = RawTextTokenizer(tokenizer)
        self.base_name = base_name
        self.adapters: dict[str, str] = {}
        self.max_batch = max_batch
        self.gather_window_s = gather_window_s
        self.options = options if options is not None else HFEngineOptions()
        self.seed = seed
        self._policies: dict[tuple[str, str], BatchingPolicy] = {}
        self._engines: dict[tuple[str, str], HFEngine] = {}
        self.model.eval()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._run_loop, name="agentgym-serve-engine", daemon=True
        )
        self._thread.start()

    # ------------------------------------------------------------------ the engine thread

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the engine thread, between batches, and wait for it (blocking)."""
        return self._submit(fn).result()

    def _submit(self, fn: Callable[[], T]) -> Future[T]:
        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop)

    async def acall(self, fn: Callable[[], T]) -> T:
        """:meth:`call` for coroutines on another loop (the HTTP server's)."""
        return await asyncio.wrap_future(self._submit(fn))

    def close(self) -> None:
        """Stop the engine thread (pending requests are cancelled)."""
        if not self.loop.is_running():
            return

        def stop() -> None:
            for task in asyncio.all_tasks(self.loop):
                task.cancel()
            self.loop.stop()

        self.loop.call_soon_threadsafe(stop)
        self._thread.join(timeout=10)
        for policy in self._policies.values():
            policy.close()

    @property
    def dtype(self) -> str:
        """The dtype the base weights are served in (``float32``, ``bfloat16``)."""
        first = next(self.base.parameters(), None)
        return "unknown" if first is None else str(first.dtype).removeprefix("torch.")

    # ------------------------------------------------------------------ names

    def served(self) -> list[ServedModel]:
        """The base model first, then the adapters in the order they were loaded."""
        return [ServedModel(self.base_name)] + [ServedModel(n, p) for n, p in self.adapters.items()]

    def names(self) -> list[str]:
        return [m.name for m in self.served()]

    def check_name(self, name: str) -> None:
        """Raise a 404 :class:`APIError` listing the served names when ``name`` is not one."""
        if name != self.base_name and name not in self.adapters:
            known = ", ".join(self.names())
            raise APIError(
                f"The model `{name}` does not exist. Served models: {known}.",
                status=404,
                param="model",
                code="model_not_found",
            )

    # ------------------------------------------------------------------ adapters

    def load_adapter(self, name: str, path: str | Path) -> None:
        """Serve the peft adapter in ``path`` as ``name`` (blocking; between batches)."""
        if not name or name == self.base_name or name in self.adapters:
            raise APIError(
                f"An adapter named {name!r} cannot be added: the name is empty or already "
                f"served ({', '.join(self.names())}); unload it first or pick another name.",
                param="lora_name",
            )
        folder = Path(path)
        if not (folder / "adapter_config.json").is_file():
            raise APIError(
                f"No peft adapter at {str(folder)!r} (no adapter_config.json); point "
                "lora_path at an adapter folder, e.g. a checkpoint's adapter/.",
                param="lora_path",
            )
        self.call(lambda: self._load(name, folder))

    def _load(self, name: str, folder: Path) -> None:
        from peft import PeftModel

        try:
            if self.model is self.base:
                self.model = PeftModel.from_pretrained(self.base, str(folder), adapter_name=name)
            else:
                self.model.load_adapter(str(folder), adapter_name=name)
            _check_loaded(self.model, folder, name)
        except (RuntimeError, ValueError, KeyError, OSError) as e:
            # put things back as they were: peft injects its layers before it loads weights
            if self.model is self.base:
                _strip_lora(self.base)
            elif name in getattr(self.model, "peft_config", {}):
                self.model.delete_adapter(name)
            raise APIError(
                f"The adapter at {str(folder)!r} does not fit the served model "
                f"{self.base_name!r}: {str(e).splitlines()[0][:300]}",
                param="lora_path",
            ) from e
        self.model.eval()
        self.adapters[name] = str(folder)
        self._engines.clear()

    def unload_adapter(self, name: str) -> None:
        """Stop serving adapter ``name`` (blocking; between batches)."""
        if name not in self.adapters:
            known = ", ".join(self.adapters) or "none"
            raise APIError(
                f"No adapter named {name!r} is loaded (adapters: {known}).",
                status=404,
                param="lora_name",
                code="model_not_found",
            )
        self.call(lambda: self._unload(name))

    def _unload(self, name: str) -> None:
        del self.adapters[name]
        if self.adapters:
            self.model.delete_adapter(name)
        else:
            self.model = self.model.unload()  # the base model, LoRA layers removed
        self._engines.clear()
        for kind in (CHAT, TEXT):
            policy = self._policies.pop((name, kind), None)
            if policy is not None:
                policy.close()

    @contextlib.contextmanager
    def _active(self, name: str) -> Iterator[None]:
        """Inside the block the model computes as ``name`` (engine thread only)."""
        if name != self.base_name and name not in self.adapters:
            raise APIError(
                f"The model `{name}` was unloaded while the request waited.",
                status=404,
                param="model",
                code="model_not_found",
            )
        if self.model is self.base:
            yield
        elif name == self.base_name:
            with self.model.disable_adapter():
                yield
        else:
            self.model.set_adapter(name)
            yield

    def _engine(self, name: str, kind: str) -> HFEngine:
        engine = self._engines.get((name, kind))
        if engine is None:
            options = self.options
            if self.model is not self.base and name == self.base_name:
                # the adapters are disabled, not removed: folding would put them back in
                options = dataclasses.replace(options, merge_lora=False)
            tok = self.tokenizer if kind == CHAT else self.raw_tokenizer
            engine = HFEngine(self.model, tok, options, seed=self.seed)
            self._engines[(name, kind)] = engine
        return engine

    # ------------------------------------------------------------------ generation

    def prompt_ids(self, kind: str, messages: Sequence[Message]) -> list[int]:
        """The prompt's token ids as the engine will encode them."""
        tok = self.tokenizer if kind == CHAT else self.raw_tokenizer
        return encode_prompt(tok, messages)

    def policy(self, name: str, kind: str) -> BatchingPolicy:
        """The batching policy of a served name and prompt kind (engine thread only)."""
        policy = self._policies.get((name, kind))
        if policy is None:
            policy = BatchingPolicy(
                _View(self, name, kind),
                max_batch=self.max_batch,
                gather_window_s=self.gather_window_s,
            )
            self._policies[(name, kind)] = policy
        return policy

    async def generate(
        self, name: str, kind: str, messages: Sequence[Message], sampling: SamplingParams
    ) -> Completion:
        """One reply, batched with the other requests for the same name (any loop)."""

        async def on_engine() -> Completion:
            return await self.policy(name, kind)(messages, sampling)

        future = asyncio.run_coroutine_threadsafe(on_engine(), self.loop)
        return await asyncio.wrap_future(future)

    def score(
        self,
        name: str,
        prompt: Sequence[int],
        reply: Sequence[int],
        top: int,
        decode: Callable[[int], str],
    ) -> list[TokenLogprob]:
        """Log-probs of ``reply`` after ``prompt`` and the ``top`` best alternatives at
        each position, under ``name`` (engine thread only; see the module docstring)."""
        import torch

        if not reply:
            return []
        with self._active(name), torch.inference_mode():
            ids = torch.tensor([list(prompt) + list(reply)], device=self.base.device)
            logits = self.model(input_ids=ids, use_cache=False).logits[0]
            logp = torch.log_softmax(logits[len(prompt) - 1 : -1].float(), dim=-1)
            chosen = logp.gather(1, torch.tensor(list(reply), device=logp.device)[:, None])
            best = logp.topk(top, dim=-1) if top else None
        out = []
        for i, token in enumerate(reply):
            alternatives: tuple[tuple[str, float], ...] = ()
            if best is not None:
                alternatives = tuple(
                    (decode(int(t)), float(v))
                    for v, t in zip(best.values[i], best.indices[i], strict=True)
                )
            out.append(TokenLogprob(decode(int(token)), float(chosen[i, 0]), alternatives))
        return out


class _View:
    """What one served name's :class:`BatchingPolicy` calls: activates the name, then
    runs the engine for it (on the engine thread)."""

    def __init__(self, served: ServedModels, name: str, kind: str) -> None:
        self.served = served
        self.name = name
        self.kind = kind

    def generate(self, requests: Sequence[Any]) -> list[Completion]:
        with self.served._active(self.name):
            return self.served._engine(self.name, self.kind).generate(requests)


def _check_loaded(model: Any, folder: Path, name: str) -> None:
    """Raise ``ValueError`` unless every tensor of the adapter file went into the model
    with its shape (peft can skip tensors that do not fit, with a warning only)."""
    from peft.utils import get_peft_model_state_dict, load_peft_weights

    saved = load_peft_weights(str(folder), device="cpu")
    loaded = get_peft_model_state_dict(model, adapter_name=name)
    missing = [k for k in saved if k not in loaded]
    wrong = [
        f"{k}: {tuple(v.shape)} in the file, {tuple(loaded[k].shape)} in the model"
        for k, v in saved.items()
        if k in loaded and tuple(v.shape) != tuple(loaded[k].shape)
    ]
    if missing or wrong:
        what = wrong[:2] or [f"{k} has no place in the model" for k in missing[:2]]
        raise ValueError("; ".join(what))


def _strip_lora(model: Any) -> None:
    """Replace every peft LoRA wrapper inside ``model`` by the layer it wraps."""
    from peft.tuners.lora import LoraLayer

    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if isinstance(child, LoraLayer):
                base = child.get_base_layer()
                while isinstance(base, LoraLayer):
                    base = base.get_base_layer()
                setattr(parent, child_name, base)


def _no_model(model: str, presets: Sequence[str]) -> ConfigError:
    """Why ``--model`` names neither a model folder nor a preset (a hub id: never
    downloaded), as an error to raise."""
    from agentgym.generation import check_model_folder

    try:
        check_model_folder(model, what="--model")
    except ConfigError as e:
        return ConfigError(f"{e} (Or name a preset: {', '.join(presets)}.)")
    return ConfigError(f"--model {model!r} is not a model folder.")


def load_served_models(
    model: str,
    *,
    loras: Sequence[tuple[str, str]] = (),
    served_name: str | None = None,
    device: str = "auto",
    dtype: str = "auto",
    **kwargs: Any,
) -> ServedModels:
    """Load ``model`` (a local HF directory, or a preset name) and its adapters, on
    ``device`` (the trainer's ``model.device`` rule: auto is the first GPU where torch
    sees one, else the CPU) in ``dtype`` (auto: the dtype the model was saved in, as
    ``--engine vllm`` serves it, :mod:`.weights`; float16, which the HF engine does not
    compute in, is served in float32; a preset: bfloat16 on a GPU, else float32).

    A preset (``tiny-qwen2``, ``tiny-deepseek-v3``) is built in process with a byte-level
    tokenizer and random weights: for trying the server, not for answers.
    """
    from agentgym.generation import PRESETS, place_model
    from agentgym.trainers import ModelConfig, build_model_and_tokenizer

    if Path(model).is_dir():
        from agentgym.generation import check_model_folder

        check_model_folder(model, what="--model")
        dtype = served_dtype(model, dtype)
        if dtype == "float16":
            print(
                f"[agentgym serve] {model} is float16; the HF engine serves it in float32 "
                "(--engine vllm serves float16).",
                file=sys.stderr,
            )
            dtype = "float32"
        cfg = ModelConfig(path=model, device=device, dtype=dtype)
    elif model in PRESETS:
        cfg = ModelConfig(preset=model, device=device, dtype=dtype)
    else:
        raise _no_model(model, PRESETS)
    base, tokenizer = build_model_and_tokenizer(cfg)
    base = place_model(base, cfg)  # before the adapters: peft puts them on the base's device
    served = ServedModels(base, tokenizer, base_name=served_name or model, **kwargs)
    try:
        for name, path in loras:
            served.load_adapter(name, path)
    except APIError as e:
        served.close()
        raise ConfigError(f"--lora {name}={path}: {e.message}") from e
    return served
