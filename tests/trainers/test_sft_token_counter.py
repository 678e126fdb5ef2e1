"""SFT examples are collected with the model tokenizer's token counter, as DAPO and eval are.

MemoryRecall with a token budget and no ``every_k_turns`` decides where its memory-summary
turns fall by counting tokens, so examples collected with the env's default bytes/4
counter put the summaries elsewhere than training and evaluation (which pass
``count_tokens`` of the real tokenizer) will.
"""

from __future__ import annotations

from typing import Any

from conftest import TINY_QWEN

from agentgym.policies import OraclePolicy
from agentgym.rollouts import rollout
from agentgym.trainers import sft
from agentgym.trainers.config import EnvSpec, EvalConfig, ModelConfig, RunConfig
from agentgym.trainers.env_setup import env_kwargs
from agentgym.trainers.sft import SFTConfig, SFTData, SFTTrain
from agentgym.trainers.sft import data as sft_data
from agentgym.trainers.sft import train as sft_train
from agentgym.types import Episode

MEMORY_RECALL = "agentgym/MemoryRecall-v0"
SUMMARY_PROMPT = "Context full: write your summary."
# Summaries on the token budget only (no every_k_turns). The budget holds the whole
# episode with neither counter, and a new conversation with both.
MEMORY_KWARGS = {
    "num_facts": 1,
    "num_distractors": 6,
    "chunk_size": 1,
    "memory": {
        "token_budget": 220,
        "summary_max_tokens": 20,
        "reserve_tokens": 8,
        "summary_prompt": SUMMARY_PROMPT,
    },
}
SEEDS = [0, 1, 2]


def _config(tmp_path: Any, **data: Any) -> SFTConfig:
    return SFTConfig(
        run=RunConfig(output_dir=str(tmp_path / "sft"), threads=1, progress=False, save_every=0),
        model=ModelConfig(
            preset="tiny-qwen2", tokenizer_vocab_size=400, preset_overrides=dict(TINY_QWEN)
        ),
        envs=[EnvSpec(id=MEMORY_RECALL, kwargs=MEMORY_KWARGS)],
        data=SFTData(**{"source": "oracle", "num_tasks": len(SEEDS), "seed_start": 0, **data}),
        train=SFTTrain(max_steps=1, batch_size=4, warmup_steps=0),
        eval=EvalConfig(at_ends=False, every=0, num_tasks=1),
        max_tokens=8,
    )


def _oracle(kwargs: dict[str, Any]) -> list[Episode]:
    return rollout(MEMORY_RECALL, OraclePolicy(), seeds=SEEDS, env_kwargs=kwargs, concurrency=1)


def _examples(episodes: list[Episode]) -> list[tuple[tuple[Any, ...], str]]:
    return [(t.messages, t.completion.text) for ep in episodes for t in ep.turns]


def _summary_turns(examples: list[tuple[tuple[Any, ...], str]]) -> list[int]:
    """Indices of the examples whose prompt asks for a memory summary."""
    return [i for i, (msgs, _) in enumerate(examples) if msgs[-1].content.endswith(SUMMARY_PROMPT)]


def test_run_sft_trains_on_oracle_turns_played_with_the_tokenizers_counter(tmp_path, monkeypatch):
    seen: list[tuple[Any, tuple[Any, ...]]] = []
    replies: list[str] = []
    encode_prompt, encode_completion = sft_train.encode_prompt, sft_train.encode_completion

    def spy_prompt(tok: Any, msgs: Any) -> list[int]:
        seen.append((tok, tuple(msgs)))
        return encode_prompt(tok, msgs)

    def spy_completion(tok: Any, reply: str) -> list[int]:
        replies.append(reply)
        return encode_completion(tok, reply)

    monkeypatch.setattr(sft_train, "encode_prompt", spy_prompt)
    monkeypatch.setattr(sft_train, "encode_completion", spy_completion)
    sft.run_sft(_config(tmp_path))

    tok = seen[0][0]
    trained = [(msgs, reply) for (_, msgs), reply in zip(seen, replies, strict=True)]
    spec = EnvSpec(id=MEMORY_RECALL, kwargs=MEMORY_KWARGS)
    with_tokenizer = _examples(_oracle(env_kwargs(spec, tok)))
    with_bytes4 = _examples(_oracle(dict(MEMORY_KWARGS)))

    # The check means something: the two counters put the summaries in different places.
    assert _summary_turns(with_tokenizer) != _summary_turns(with_bytes4)
    assert _summary_turns(with_tokenizer)
    assert _summary_turns(trained) == _summary_turns(with_tokenizer)
    assert trained == with_tokenizer


def test_build_model_and_examples_learns_the_vocabulary_then_recollects(tmp_path):
    cfg = _config(tmp_path)
    _, tok, examples = sft.build_model_and_examples(cfg)
    first_pass = sft.collect_examples(cfg)
    # the vocabulary was learned from the default-counter collection ...
    assert len(tok) == 400
    assert first_pass == _examples(_oracle(dict(MEMORY_KWARGS)))
    # ... and the examples are those of the learned tokenizer's counter
    assert examples == sft.collect_examples(cfg, tok)
    assert examples == _examples(_oracle(env_kwargs(cfg.envs[0], tok)))
    assert examples != first_pass


def test_worked_solutions_get_the_tokenizers_counter(tmp_path, toy_envs_registered, monkeypatch):
    made: list[dict[str, Any]] = []
    worked_solutions = sft_data._worked_solutions

    def spy(env_id: str, kwargs: dict[str, Any], *args: Any, **kw: Any) -> list[Any]:
        made.append(kwargs)
        return worked_solutions(env_id, kwargs, *args, **kw)

    monkeypatch.setattr(sft_data, "_worked_solutions", spy)
    cfg = _config(tmp_path, source="worked_solution")
    cfg.envs = [EnvSpec(id="agentgym-test/EvenChars-v0")]
    cfg.model = ModelConfig(preset="tiny-qwen2", preset_overrides=dict(TINY_QWEN))
    _, tok, examples = sft.build_model_and_examples(cfg)

    assert len(examples) == len(SEEDS) and len(made) == 1
    count = made[0]["count_tokens"]
    text = "locker 123: 4567"
    assert count(text) == len(tok.encode(text, add_special_tokens=False))
