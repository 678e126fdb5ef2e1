"""AppGen: multi-file application generation with hidden tests (``agentgym/AppGen-v0``).

* :mod:`.taskset` loads task directories (spec, scaffold, visible and hidden tests,
  reference solution, ``task.toml``) and hashes them;
* :mod:`.protocol` parses the agent's actions;
* :mod:`.grading` runs the hidden tests in a sandbox of their own, defended against tampering;
* :mod:`.env` is the environment, :class:`AppGenEnv`;
* :mod:`.authoring` writes a starter task, :mod:`.checktask` proves a task directory sound
  (``agentgym appgen new-task`` / ``check-task``).
"""

from __future__ import annotations

from agentgym.envs.appgen.authoring import new_task
from agentgym.envs.appgen.checktask import CheckReport, check_task
from agentgym.envs.appgen.env import AppGenEnv
from agentgym.envs.appgen.grading import GradeResult, grade
from agentgym.envs.appgen.taskset import (
    AppTask,
    builtin_task_names,
    find_task_dirs,
    load_task,
    load_tasks,
)

__all__ = [
    "AppGenEnv",
    "AppTask",
    "CheckReport",
    "GradeResult",
    "builtin_task_names",
    "check_task",
    "find_task_dirs",
    "grade",
    "load_task",
    "load_tasks",
    "new_task",
]
