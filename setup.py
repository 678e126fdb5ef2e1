"""Package list for the folder -> import-name mapping declared in pyproject.toml.

The top-level folders envs/, sandbox/, trainers/ and benchmarks/ install as
``agentgym.envs``, ``agentgym.sandbox`` and so on; this file walks each folder so that
sub-packages are found without listing them by hand.

AppGen's tasks (``envs/appgen/tasks/<task>/...``: specs, scaffolds, tests and reference
solutions) are data, but their folders hold ``.py`` files, so setuptools sees them as
packages; they are declared as data-only namespace packages here (their files come in
through pyproject.toml's package-data), which keeps the install quiet and complete.
"""

from setuptools import find_namespace_packages, find_packages, setup

ROOTS = {
    "agentgym": "agentgym",
    "agentgym.envs": "envs",
    "agentgym.sandbox": "sandbox",
    "agentgym.trainers": "trainers",
    "agentgym.benchmarks": "benchmarks",
}
#: task data folders (inside ``envs``), installed whole
TASK_DATA = "appgen.tasks"

packages = []
for name, folder in ROOTS.items():
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_packages(folder)]
packages += [
    f"agentgym.envs.{sub}"
    for sub in find_namespace_packages("envs", include=[TASK_DATA, f"{TASK_DATA}.*"])
    if "__pycache__" not in sub
]

setup(packages=packages)
