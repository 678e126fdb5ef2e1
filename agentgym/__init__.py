"""agentgym: agentic multi-conversation environments and an all-sync DAPO trainer.

``import agentgym`` registers the built-in environments under the ``agentgym/``
namespace and loads third-party plugins (entry-point group ``agentgym.envs``)::

    import gymnasium as gym
    import agentgym

    env = gym.make("agentgym/MemoryRecall-v0")
    obs, info = env.reset(seed=0)
"""

from __future__ import annotations

from agentgym.env import ActResult, ConversationEnv, Task
from agentgym.errors import (
    AgentGymError,
    ConfigError,
    DataError,
    EnvStateError,
    PolicyError,
    SandboxError,
    UnknownNameError,
)
from agentgym.memory import MemoryConfig
from agentgym.registration import agentgym_env_ids, load_plugins, make, register_builtin_envs
from agentgym.spaces import ChatObservation, UnicodeText
from agentgym.tokens import approx_tokens
from agentgym.types import (
    Completion,
    Episode,
    Message,
    SamplingParams,
    Turn,
    read_episodes,
    write_episodes,
)

__version__ = "0.1.0"

register_builtin_envs()
load_plugins()


def __getattr__(name: str):
    # Heavier pieces load on first use so `import agentgym` stays fast.
    if name == "check_env":
        from agentgym.checker import check_env

        return check_env
    if name in ("rollout", "rollout_async", "EnvCache"):
        from agentgym import rollouts

        return getattr(rollouts, name)
    if name == "RayEnvWorkers":
        from agentgym.workers import RayEnvWorkers

        return RayEnvWorkers
    raise AttributeError(f"module 'agentgym' has no attribute {name!r}")


__all__ = [
    "ActResult",
    "AgentGymError",
    "ChatObservation",
    "Completion",
    "ConfigError",
    "ConversationEnv",
    "DataError",
    "EnvCache",
    "EnvStateError",
    "Episode",
    "MemoryConfig",
    "Message",
    "PolicyError",
    "RayEnvWorkers",
    "SamplingParams",
    "SandboxError",
    "Task",
    "Turn",
    "UnicodeText",
    "UnknownNameError",
    "__version__",
    "agentgym_env_ids",
    "approx_tokens",
    "check_env",
    "load_plugins",
    "make",
    "read_episodes",
    "register_builtin_envs",
    "rollout",
    "rollout_async",
    "write_episodes",
]
