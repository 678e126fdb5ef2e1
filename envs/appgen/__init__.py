"""AppGen: multi-file application generation with hidden tests (``agentgym/AppGen-v0``).

* :mod:`.taskset` loads task directories (spec, scaffold, visible and hidden tests,
  reference solution, ``task.toml``) and hashes them;
* :mod:`.protocol` parses the agent's actions;
* :mod:`.grading` runs the hidden tests in a fresh sandbox, defended against tampering;
* :mod:`.env` is the environment, :class:`AppGenEnv`.
"""

from __future__ import annotations

from agentgym.envs.appgen.env import AppGenEnv
from agentgym.envs.appgen.grading import GradeResult, grade
from agentgym.envs.appgen.taskset import AppTask, builtin_task_names, load_task, load_tasks

__all__ = [
    "AppGenEnv",
    "AppTask",
    "GradeResult",
    "builtin_task_names",
    "grade",
    "load_task",
    "load_tasks",
]
