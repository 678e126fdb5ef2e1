"""agentgym environments in TRL's ``GRPOTrainer``, through its ``rollout_func`` hook.

TRL (1.16) offers two ways to bring an environment to ``GRPOTrainer``:
``environment_factory`` (an object whose methods the model calls as *tools*, one
conversation per sample) and ``rollout_func(prompts, trainer) -> {prompt_ids,
completion_ids, logprobs, env_mask?, ...}`` (the caller generates however it likes and
hands back token ids; other keys reach the reward functions). An agentgym env is not a
tool API -- its action is the assistant's whole reply, it may hold several turns and
several conversations -- so :class:`TRLEnvAdapter` uses ``rollout_func``:

* :meth:`TRLEnvAdapter.dataset` is the ``train_dataset``: one row per task, ``prompt``
  being the env's first observation for that reset seed (what TRL logs and repeats
  ``num_generations`` times) and ``agentgym_seed`` the seed;
* :meth:`TRLEnvAdapter.rollout` is the ``rollout_func``: each distinct prompt of the
  batch is played as an agentgym task, ``count`` episodes of one group, by
  :func:`agentgym.rollout_async` against the trainer's current model (agentgym's HF
  engine batches every request of every episode, as in agentgym's own trainer), all
  turns included;
* :meth:`TRLEnvAdapter.reward` is the reward function: the episode's reward (its
  breakdown stays in the env). An episode that failed (an infrastructure error) gets
  ``None``, which TRL leaves out of its group's baseline.

TRL trains one token sequence per sample, so an episode becomes one sequence: the first
prompt, then every turn's reply (trained, ``env_mask`` 1), with what the environment
said between them (``env_mask`` 0, not trained). Within one conversation this is exactly
the context the reply was sampled in (the chat template renders each next prompt as the
previous prompt, reply and the env's new message: checked token by token). A *new*
conversation (after a memory-summary turn) starts from a fresh context in agentgym; in
the single TRL sequence its prompt follows the earlier conversations, so those replies
are trained in a longer context than they were sampled in -- a departure agentgym's own
trainer does not make (it trains each conversation as its own sequence, with the
episode's advantage on all of them). The returned ``logprobs`` are the engine's
sampling log-probs of the replies (0 on environment tokens); with a vLLM backend TRL uses
them for its importance-sampling correction.

Generation runs in the precision TRL trains in (``GRPOConfig``'s ``bf16``, its default,
or ``fp16``: the autocast accelerate wraps the model's forward in). The trainer's model
failing to generate raises :class:`~agentgym.PolicyError` with the episode's recorded
failure, never an episode without tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from agentgym import (
    ConfigError,
    Episode,
    LocalEnvs,
    PolicyError,
    SamplingParams,
    derive_seed,
    rollout_async,
)

INSTALL_HINT = "pip install 'agentgym-toolkit[trl]'"


def _key(prompt: Any) -> str:
    """A prompt (messages or text) as a lookup key."""
    if isinstance(prompt, str):
        return prompt
    return json.dumps(
        [{"role": m["role"], "content": m["content"]} for m in prompt], ensure_ascii=False
    )


class TRLEnvAdapter:
    """One registered agentgym env as TRL ``GRPOTrainer`` data, rollouts and reward.

    Args:
        env_id: a registered env id (``agentgym/BalancedMath-v0``).
        tokenizer: the model's tokenizer (a chat template; TRL's ``processing_class``).
            Envs are made with its exact token counter.
        env_kwargs: ``gym.make`` keyword arguments.
        max_tokens: the reply cap per turn (TRL's ``max_completion_length`` caps the
            whole sequence; keep it above what an episode needs).
        temperature / top_p: sampling of the replies.
        concurrency: episodes in flight at once.
        seed: seeds each rollout's sampling (with the trainer's step).

    Example::

        adapter = TRLEnvAdapter("agentgym/BalancedMath-v0", tok, max_tokens=64)
        trainer = GRPOTrainer(
            model=model, processing_class=tok, args=GRPOConfig(...),
            train_dataset=adapter.dataset(range(1000)),
            reward_funcs=adapter.reward, rollout_func=adapter.rollout,
        )
    """

    def __init__(
        self,
        env_id: str,
        tokenizer: Any,
        *,
        env_kwargs: Mapping[str, Any] | None = None,
        max_tokens: int = 256,
        temperature: float = 1.0,
        top_p: float = 1.0,
        concurrency: int = 64,
        seed: int = 0,
    ) -> None:
        from agentgym import counter_from_tokenizer, resolve_env_id

        self.env_id = resolve_env_id(env_id)
        self.tokenizer = tokenizer
        self.env_kwargs = {"count_tokens": counter_from_tokenizer(tokenizer), **(env_kwargs or {})}
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.concurrency = concurrency
        self.seed = seed
        self.seeds_by_prompt: dict[str, int] = {}
        self.calls = 0
        #: the episodes of the last rollout, in the order of its prompts
        self.last_episodes: list[Episode] = []
        #: turns appended as a fresh context (new conversations, or a template that did
        #: not extend the previous prompt), over all rollouts
        self.fresh_contexts = 0
        self._host: LocalEnvs | None = None

        def agentgym_reward(
            prompts: Any = None, completions: Any = None, **kwargs: Any
        ) -> list[float | None]:
            """TRL reward function: the episode's reward (``None``: a failed episode)."""
            rewards = kwargs.get("agentgym_reward")
            if rewards is None:
                raise ConfigError(
                    "TRLEnvAdapter.reward needs the rollout's rewards: pass rollout_func="
                    "adapter.rollout to GRPOTrainer together with reward_funcs=adapter.reward."
                )
            return list(rewards)

        #: the reward function to pass as ``reward_funcs`` (TRL logs it by its name,
        #: ``agentgym_reward``)
        self.reward = agentgym_reward

    # ------------------------------------------------------------------ data

    def dataset(self, seeds: Iterable[int]) -> Any:
        """A ``datasets.Dataset`` with one row per reset seed: ``prompt`` (the first
        observation, as chat messages) and ``agentgym_seed``."""
        try:
            from datasets import Dataset
        except ImportError as e:
            raise ConfigError(f"TRLEnvAdapter.dataset needs datasets: {INSTALL_HINT} ({e}).") from e
        import gymnasium as gym

        env = gym.make(self.env_id, **self.env_kwargs)
        rows = []
        try:
            for s in seeds:
                obs, _ = env.reset(seed=int(s))
                prompt = [m.to_dict() for m in obs]
                self.seeds_by_prompt.setdefault(_key(prompt), int(s))
                rows.append({"prompt": prompt, "agentgym_seed": int(s)})
        finally:
            env.close()
        return Dataset.from_list(rows)

    # ------------------------------------------------------------------ rollouts

    def rollout(self, prompts: Sequence[Any], trainer: Any) -> dict[str, list[Any]]:
        """TRL's ``rollout_func``: play one episode per prompt (see the module docs)."""
        groups: dict[str, list[int]] = {}
        for i, p in enumerate(prompts):
            key = _key(p)
            if key not in self.seeds_by_prompt:
                raise ConfigError(
                    "TRLEnvAdapter.rollout got a prompt that is not one of its dataset's "
                    "first observations; build the train_dataset with adapter.dataset(seeds)."
                )
            groups.setdefault(key, []).append(i)
        self.calls += 1
        step = getattr(getattr(trainer, "state", None), "global_step", 0)
        sampling = SamplingParams(
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            seed=derive_seed("trl", self.seed, step, self.calls),
        )
        with _generation_model(trainer) as model, _mixed_precision(trainer, model):
            from agentgym.generation import HFEngine

            engine = HFEngine(model, self.tokenizer, seed=self.seed)
            policy = engine.as_policy()  # generates on this thread, under the autocast
            try:
                per_group = asyncio.run(self._play(policy, groups, sampling))
            finally:
                policy.close()
        episodes: list[Episode | None] = [None] * len(prompts)
        for key, slots in groups.items():
            for slot, ep in zip(slots, per_group[key], strict=True):
                episodes[slot] = ep
        self.last_episodes = [ep for ep in episodes if ep is not None]
        _raise_unplayable(self.last_episodes)
        rows = [self.episode_row(ep) for ep in self.last_episodes]
        return {
            "prompt_ids": [r["prompt_ids"] for r in rows],
            "completion_ids": [r["completion_ids"] for r in rows],
            "logprobs": [r["logprobs"] for r in rows],
            "env_mask": [r["env_mask"] for r in rows],
            "agentgym_reward": [
                None if ep.failed else float(ep.reward) for ep in self.last_episodes
            ],
            "agentgym_turns": [len(ep.turns) for ep in self.last_episodes],
            "agentgym_conversations": [ep.num_conversations for ep in self.last_episodes],
        }

    async def _play(
        self, policy: Any, groups: Mapping[str, list[int]], sampling: SamplingParams
    ) -> dict[str, list[Episode]]:
        if self._host is None:
            self._host = LocalEnvs(threads=4, keep=True)
        keys = list(groups)
        played = await asyncio.gather(
            *[
                rollout_async(
                    self.env_id,
                    policy,
                    seeds=[self.seeds_by_prompt[k]],
                    group_size=len(groups[k]),
                    sampling=sampling,
                    concurrency=self.concurrency,
                    env_kwargs=self.env_kwargs,
                    env_host=self._host,
                )
                for k in keys
            ]
        )
        return dict(zip(keys, played, strict=True))

    def episode_row(self, episode: Episode) -> dict[str, list[Any]]:
        """One episode as TRL's sequence: prompt ids, then replies and env tokens."""
        from agentgym.generation import encode_prompt

        tok = self.tokenizer
        first = episode.turns[0]
        prompt = encode_prompt(tok, first.messages)
        seq: list[int] = []
        mask: list[int] = []
        logprobs: list[float] = []
        context = list(prompt)
        for k, turn in enumerate(episode.turns):
            if k > 0:
                ids = encode_prompt(tok, turn.messages)
                if ids[: len(context)] == context:
                    new = ids[len(context) :]  # the env's message(s) after the last reply
                else:
                    new = ids  # a fresh context: a new conversation (see the module docs)
                    self.fresh_contexts += 1
                seq += new
                mask += [0] * len(new)
                logprobs += [0.0] * len(new)
                context = list(ids)
            reply = list(turn.completion.token_ids) or list(
                tok(turn.completion.text, add_special_tokens=False)["input_ids"]
            )
            lps = list(turn.completion.logprobs) or [0.0] * len(reply)
            seq += reply
            mask += [1] * len(reply)
            logprobs += lps
            context += reply
        return {"prompt_ids": prompt, "completion_ids": seq, "logprobs": logprobs, "env_mask": mask}

    def close(self) -> None:
        """Close the env instances kept between rollouts."""
        if self._host is not None:
            self._host.close()
            self._host = None


def _raise_unplayable(episodes: Sequence[Episode]) -> None:
    """Raise on an episode TRL cannot train on: one whose policy (the trainer's model)
    failed, or one that failed before its first reply. Its recorded failure is named.

    An env or sandbox failure after the first reply stays a failed episode (reward
    ``None``, left out of its group's baseline), as in agentgym's own trainer.
    """
    for ep in episodes:
        failure = ep.failure
        if failure is None or (failure.reason != "policy_error" and ep.turns):
            continue
        bad = sum(e.failure is not None and e.failure.reason == failure.reason for e in episodes)
        what = (
            "the trainer's model could not generate"
            if failure.reason == "policy_error"
            else ("the episode failed before the model's first reply")
        )
        raise PolicyError(
            f"TRLEnvAdapter.rollout: {what} ({bad} of {len(episodes)} episodes; "
            f"{failure.reason} at {failure.where}, task {ep.task_id} seed {ep.seed}): "
            f"{failure.message}\n{failure.detail}".rstrip()
        )


@contextlib.contextmanager
def _mixed_precision(trainer: Any, model: Any) -> Iterator[None]:
    """The autocast TRL trains under (``GRPOConfig``'s ``bf16``, on by default, or
    ``fp16``), for generation too: accelerate wraps the model's forward in it, so the
    engine's own decode steps must run in the same precision as that forward."""
    import torch

    precision = getattr(getattr(trainer, "accelerator", None), "mixed_precision", "no")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(str(precision))
    if dtype is None:
        yield
        return
    device = next(model.parameters()).device
    with torch.autocast(device_type=device.type, dtype=dtype), warnings.catch_warnings():
        # the fused decode step's RMSNorm sees a half-precision input and float weights
        # under autocast: torch computes it unfused and says so, once per process
        warnings.filterwarnings("ignore", "Mismatch dtype between input and weight")
        yield


class _generation_model:
    """The trainer's model, unwrapped for generation (TRL's own helper when present)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self._ctx: Any = None

    def __enter__(self) -> Any:
        model = getattr(self.trainer, "model_wrapped", None) or self.trainer.model
        accelerator = getattr(self.trainer, "accelerator", None)
        if accelerator is None:
            return model
        try:
            from trl.models import unwrap_model_for_generation
        except ImportError:
            return accelerator.unwrap_model(model)
        self._ctx = unwrap_model_for_generation(model, accelerator)
        return self._ctx.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(*exc)
