"""agentgym: agentic multi-conversation environments and an all-sync DAPO trainer.

``import agentgym`` registers the built-in environments under the ``agentgym/``
namespace and loads third-party plugins (entry-point group ``agentgym.envs``)::

    import gymnasium as gym
    import agentgym

    env = gym.make("agentgym/MemoryRecall-v0")
    obs, info = env.reset(seed=0)
"""

from __future__ import annotations

from agentgym.config import (
    config_check,
    config_from_dict,
    config_to_dict,
    config_to_yaml,
    load_config,
    save_config,
)
from agentgym.distribution import DISTRIBUTION, install_hint
from agentgym.env import ActResult, ConversationEnv, Task
from agentgym.errors import (
    AgentGymError,
    CheckpointError,
    ConfigError,
    DataError,
    EnvStateError,
    InfraError,
    PolicyError,
    SandboxError,
    UnknownNameError,
    did_you_mean,
)
from agentgym.lazy import lazy_exports
from agentgym.memory import MemoryConfig
from agentgym.metrics import (
    episode_accuracy,
    episode_overlong,
    episode_solved,
    episode_tokens,
    failed_attempts,
    retried_reasons,
    summary_tokens,
    working_context,
)
from agentgym.progress import Progress
from agentgym.registration import (
    agentgym_env_ids,
    env_arguments,
    load_plugins,
    make,
    plugin_of,
    register_builtin_envs,
    resolve_env_id,
)
from agentgym.spaces import ChatObservation, UnicodeText
from agentgym.tokens import (
    TokenCounter,
    approx_tokens,
    clean_text,
    count_message_tokens,
    counter_from_tokenizer,
)
from agentgym.types import (
    TURN_KINDS,
    Completion,
    Episode,
    EpisodeFailure,
    Message,
    SamplingParams,
    Turn,
    iter_episodes,
    read_episodes,
    to_openai,
    write_episodes,
)

__version__ = "0.1.0"

register_builtin_envs()
load_plugins()


#: names loaded on first use, so that `import agentgym` stays fast: name -> module
_LAZY = {
    "check_env": "agentgym.checker",
    "EnvCheckError": "agentgym.checker",
    "rollout": "agentgym.rollouts",
    "rollout_async": "agentgym.rollouts",
    "LocalEnvs": "agentgym.local_envs",
    "derive_seed": "agentgym.rollouts",
    "HELD_OUT_SEED_START": "agentgym.rollouts",
    "RayEnvWorkers": "agentgym.workers",
    "Policy": "agentgym.policies",
    "ScriptedPolicy": "agentgym.policies",
    "OraclePolicy": "agentgym.policies",
    "RandomPolicy": "agentgym.policies",
    "OpenAIPolicy": "agentgym.policies",
    "make_policy": "agentgym.policies",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "DISTRIBUTION",
    "HELD_OUT_SEED_START",
    "TURN_KINDS",
    "ActResult",
    "AgentGymError",
    "ChatObservation",
    "CheckpointError",
    "Completion",
    "ConfigError",
    "ConversationEnv",
    "DataError",
    "EnvCheckError",
    "EnvStateError",
    "Episode",
    "EpisodeFailure",
    "InfraError",
    "LocalEnvs",
    "MemoryConfig",
    "Message",
    "OpenAIPolicy",
    "OraclePolicy",
    "Policy",
    "PolicyError",
    "Progress",
    "RandomPolicy",
    "RayEnvWorkers",
    "SamplingParams",
    "SandboxError",
    "ScriptedPolicy",
    "Task",
    "TokenCounter",
    "Turn",
    "UnicodeText",
    "UnknownNameError",
    "__version__",
    "agentgym_env_ids",
    "approx_tokens",
    "check_env",
    "clean_text",
    "config_check",
    "config_from_dict",
    "config_to_dict",
    "config_to_yaml",
    "count_message_tokens",
    "counter_from_tokenizer",
    "derive_seed",
    "did_you_mean",
    "env_arguments",
    "episode_accuracy",
    "episode_overlong",
    "episode_solved",
    "episode_tokens",
    "failed_attempts",
    "install_hint",
    "iter_episodes",
    "lazy_exports",
    "load_config",
    "load_plugins",
    "make",
    "make_policy",
    "plugin_of",
    "read_episodes",
    "register_builtin_envs",
    "resolve_env_id",
    "retried_reasons",
    "rollout",
    "rollout_async",
    "save_config",
    "summary_tokens",
    "to_openai",
    "working_context",
    "write_episodes",
]
