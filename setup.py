"""Package list for the folder -> import-name mapping declared in pyproject.toml.

The top-level folders envs/, sandbox/, trainers/ and benchmarks/ install as
``agentgym.envs``, ``agentgym.sandbox`` and so on; this file walks each folder so that
sub-packages are found without listing them by hand.
"""

from setuptools import find_packages, setup

ROOTS = {
    "agentgym": "agentgym",
    "agentgym.envs": "envs",
    "agentgym.sandbox": "sandbox",
    "agentgym.trainers": "trainers",
    "agentgym.benchmarks": "benchmarks",
}

packages = []
for name, folder in ROOTS.items():
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_packages(folder)]

setup(packages=packages)
