"""The strategy protocol: the learner calls a backend's public methods and nothing else,
and a backend written in a test from those methods alone trains as the one-process one."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import torch
from conftest import TINY_QWEN

from agentgym.generation import build_preset
from agentgym.trainers.batch import Sample
from agentgym.trainers.config import AlgorithmConfig, LoraSettings, OptimConfig
from agentgym.trainers.learner import Learner
from agentgym.trainers.models import apply_lora
from agentgym.trainers.strategy import Strategy
from agentgym.trainers.update import update_policy

LEARNER = Path(inspect.getfile(Learner))


def _strategy_calls() -> set[str]:
    """Every attribute the learner reads of its strategy (``self.strategy.x``, or
    ``s.x`` after ``s = self.strategy``)."""
    tree = ast.parse(LEARNER.read_text())
    aliases = {"strategy"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and ast.unparse(node.value) == "self.strategy":
            aliases |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    out = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        owner = ast.unparse(node.value)
        if owner == "self.strategy" or owner in aliases - {"strategy"}:
            out.add(node.attr)
    return out


def test_the_learner_calls_only_the_protocols_public_methods():
    calls = _strategy_calls()
    assert {"parallelize", "forward_backward", "step", "adapter_state"} <= calls  # found
    assert not [c for c in calls if c.startswith("_")]
    assert calls <= {n for n in dir(Strategy) if not n.startswith("_")} | {"dist"}


def test_no_backend_overrides_a_private_method_the_base_class_calls():
    from agentgym.trainers.parallel.strategy import MeshStrategy
    from agentgym.trainers.strategies import FSDP2, DeepSpeedZeRO

    tree = ast.parse(inspect.getsource(Strategy))
    called = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and ast.unparse(node.value) == "self"
        and node.attr.startswith("_")
    }
    for backend in (DeepSpeedZeRO, FSDP2, MeshStrategy):
        assert not called & set(vars(backend)), backend


class _Counting(Strategy):
    """A backend of the protocol's public methods alone: counts the passes and steps."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {}

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def backward(self, loss: torch.Tensor) -> None:
        self._count("backward")
        super().backward(loss)

    def step(
        self, optimizer: torch.optim.Optimizer, max_norm: float, *, policy: bool = True
    ) -> list[float]:
        self._count("step")
        return super().step(optimizer, max_norm, policy=policy)


def _samples(vocab: int) -> list[Sample]:
    """Three prompts, four replies each, of 2 to 6 tokens and mixed advantages."""
    g = torch.Generator().manual_seed(0)
    out = []
    for task, plen in enumerate([5, 9, 7]):
        prompt = tuple(torch.randint(4, vocab, (plen,), generator=g).tolist())
        for k in range(4):
            reply = tuple(torch.randint(4, vocab, (2 + k,), generator=g).tolist())
            out.append(Sample(prompt, reply, (-1.0) ** k * (1 + task), task * 4 + k))
    return out


def _learner(tokenizer, strategy: Strategy | None) -> Learner:
    model = apply_lora(
        build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN, seed=3), LoraSettings(r=4)
    )
    algo = AlgorithmConfig(micro_batch_size=4, updates_per_batch=2)
    return Learner(
        model, algo, OptimConfig(lr=1e-2), pad_id=tokenizer.pad_token_id, strategy=strategy
    )


def test_a_backend_of_public_methods_trains_as_the_one_process_one(tokenizer):
    samples = _samples(len(tokenizer))
    plain, counted = _learner(tokenizer, None), _learner(tokenizer, _Counting())
    for learner in (plain, counted):
        update_policy(learner, samples, AlgorithmConfig(updates_per_batch=2), temperature=1.0)
    # two mini-batches of 6 samples, each 2 micro-batches of at most 4: 4 passes, 2 steps
    assert counted.strategy.calls == {"backward": 4, "step": 2}
    a, b = plain.state_dict()["adapter"], counted.state_dict()["adapter"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(v, torch.zeros_like(v)) for k, v in a.items() if "lora_B" in k)
