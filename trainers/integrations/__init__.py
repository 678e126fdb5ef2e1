"""agentgym meets other tools: TRL's trainers and Hugging Face datasets.

* :class:`TRLEnvAdapter` (:mod:`.trl`): any registered agentgym env as TRL
  ``GRPOTrainer`` data, ``rollout_func`` and reward function (multi-turn and
  multi-conversation episodes included);
* episodes as Parquet / ``datasets`` with the conversation structure kept, and back
  (:mod:`.episodes`): :func:`write_episodes_parquet`, :func:`read_episodes_parquet`,
  :func:`episodes_to_dataset`, :func:`episodes_from_dataset`, :func:`episodes_to_table`,
  :func:`episodes_from_table`, :func:`episode_schema`; the episode files of a run folder:
  :func:`find_episode_files`, :func:`iter_run_episodes`, :func:`run_episodes_table` (with
  each row's policy and source file), :func:`sample_episode` (a training run's
  ``samples.jsonl`` row).

See docs/integrations.md.
"""

from __future__ import annotations

from agentgym import lazy_exports

#: public name -> the module that defines it (loaded on first use)
_LAZY = {
    "TRLEnvAdapter": "agentgym.trainers.integrations.trl",
    "episode_schema": "agentgym.trainers.integrations.episodes",
    "episodes_to_table": "agentgym.trainers.integrations.episodes",
    "episodes_from_table": "agentgym.trainers.integrations.episodes",
    "write_episodes_parquet": "agentgym.trainers.integrations.episodes",
    "read_episodes_parquet": "agentgym.trainers.integrations.episodes",
    "episodes_to_dataset": "agentgym.trainers.integrations.episodes",
    "episodes_from_dataset": "agentgym.trainers.integrations.episodes",
    "find_episode_files": "agentgym.trainers.integrations.episodes",
    "iter_run_episodes": "agentgym.trainers.integrations.episodes",
    "run_episodes_table": "agentgym.trainers.integrations.episodes",
    "sample_episode": "agentgym.trainers.integrations.episodes",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = sorted(_LAZY)
