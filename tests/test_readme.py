"""The README is executable: every command of its shell blocks, and each config header's
command, runs in a scratch folder, in the README's order, and must succeed.

The commands run as a user types them, from a folder that holds only ``configs/`` (the
checkout's, read-only) and ``.venv``; every run folder they write lands there, never in the
checkout's ``runs/``. Step counts are made small by the rules in :func:`shrink`, each of
which only lowers a count (steps, tasks, episodes, a batch's examples) or adds a scratch
port; nothing else about a command changes. A config header's command that, made small, is
a command already run (the README's ``vapo_balanced_math`` line) is not run a second time.
A few commands are not run here, each for a stated reason, in :data:`NOT_RUN_HERE`: the
test fails if such a command disappears from the README (the reason would be stale) or if
a new README command matches none of the rules.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = REPO / ".venv" / "bin"

#: commands of the README or a config header not run by this test, and why
NOT_RUN_HERE = {
    "bash scripts/quickstart.sh": "the main job itself (its stages are the sft/train lines)",
    "bash scripts/test.sh": "this test suite itself",
    "bash scripts/memory_recall_demo.sh": "run in its smoke form by tests/trainers/test_demo_scripts.py",
    "--nnodes": "a multi-node launch (48 GPUs)",
}


# ---------------------------------------------------------------------- reading the commands
def readme_blocks(text: str) -> list[tuple[str, list[str]]]:
    """The README's fenced blocks in order: (language, commands); a shell command joins
    its continuation lines and loses its comment."""
    blocks, lang, body = [], None, []
    for line in text.splitlines():
        fence = re.match(r"^```(\w*)\s*$", line)
        if fence and lang is None:
            lang, body = fence.group(1) or "text", []
        elif fence:
            blocks.append((lang, shell_commands(body) if lang == "bash" else ["\n".join(body)]))
            lang = None
        elif lang is not None:
            body.append(line)
    return blocks


def shell_commands(lines: list[str]) -> list[str]:
    commands, current = [], ""
    for line in lines:
        code = _strip_comment(line).rstrip()
        if code.endswith("\\"):
            current += code[:-1] + " "
            continue
        current += code
        if current.strip():
            commands.append(" ".join(current.split()))
        current = ""
    return commands


def _strip_comment(line: str) -> str:
    """The line without a trailing ``# comment`` (a ``#`` inside quotes stays)."""
    quote = None
    for i, ch in enumerate(line):
        if ch in "'\"" and quote in (None, ch):
            quote = None if quote == ch else ch
        elif ch == "#" and quote is None and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def config_header_commands(path: Path) -> list[str]:
    """The commands a config file's leading comment shows (``#   agentgym ...``)."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        body = line[1:]
        continued = bool(lines) and lines[-1].rstrip().endswith("\\")
        if continued or re.match(r"^\s{2,}(agentgym|bash) ", body):
            lines.append(body)
    return shell_commands(lines)


# ---------------------------------------------------------------------- making them small
#: (dotted key, small value) lowered for `agentgym train` / `apo-values` (where larger)
TRAIN_SMALL = (
    ("run.max_steps", 1),
    ("rollout.batch_tasks", 2),
    ("rollout.group_size", 4),
    ("rollout.tasks_per_round", 3),
    ("rollout.max_tokens", 24),
    ("algorithm.max_generation_rounds", 1),
    ("algorithm.apo_value_samples", 2),
    ("critic.pretrain_steps", 1),
    ("eval.num_tasks", 2),
)
SFT_SMALL = (
    ("train.max_steps", 4),
    ("train.save_every", 2),
    ("train.batch_size", 8),
    ("data.num_tasks", 64),
    ("eval.num_tasks", 2),
    ("max_tokens", 24),
)


def shrink(cmd: str, port: int) -> str:
    """The command with small counts, as the module docstring says."""
    cmd = cmd.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    words = cmd.split()
    if cmd.startswith("agentgym sft "):
        cmd += _lowered(words, SFT_SMALL)
    elif cmd.startswith(("agentgym train ", "agentgym apo-values ")) and "--print" not in cmd:
        steps = re.search(r"run\.max_steps=(\d+)", cmd)
        if steps:  # 10 -> 2, 12 -> 3: a resumed run still has steps left to take
            cmd = cmd.replace(steps.group(0), f"run.max_steps={math.ceil(int(steps.group(1)) / 5)}")
        cmd += _lowered(words, TRAIN_SMALL) + " run.progress=false"
    elif cmd.startswith("agentgym eval "):
        cmd = re.sub(r"--episodes \d+", "--episodes 2", cmd)
        if "--episodes" not in cmd:
            cmd += " --episodes 2"
        if "--config" not in cmd:  # else the run's reply length
            cmd += " --max-tokens 16"
    elif cmd.startswith("agentgym serve "):
        cmd += f" --port {port}"
    return cmd


def _lowered(words: list[str], small: tuple[tuple[str, int], ...]) -> str:
    """Overrides setting each key of ``small`` to its value where the command's config
    (its first ``*.yaml`` word) has it larger and the command does not set it."""
    config = yaml.safe_load((REPO / next(w for w in words if w.endswith(".yaml"))).read_text())
    out = ""
    for key, value in small:
        if any(w.startswith(f"{key}=") for w in words):
            continue
        node = config
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None and node > value:  # unset: the default, small already
            out += f" {key}={value}"
    return out


# ---------------------------------------------------------------------- running them
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Scratch:
    """A folder to run the README's commands in, and a server in the background."""

    def __init__(self, root: Path, log: list[str] | None = None) -> None:
        self.root, self.port, self.server = root, _free_port(), None
        root.mkdir(exist_ok=True)
        (root / "configs").symlink_to(REPO / "configs")
        (root / ".venv").symlink_to(REPO / ".venv")
        self.env = {
            **os.environ,
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "WANDB_MODE": "offline",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        self.log = [] if log is None else log

    def run(self, cmd: str, *, stdin: str = "", timeout: float = 600) -> None:
        if cmd.startswith("agentgym serve "):
            return self.serve(cmd)
        self.ensure_server_for(cmd)
        t0 = time.monotonic()
        r = subprocess.run(
            ["bash", "-c", cmd],
            cwd=self.root,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        self.log.append(f"{time.monotonic() - t0:6.1f} s  {cmd}")
        assert r.returncode == 0, (
            f"README command failed (rc {r.returncode}): {cmd}\n"
            f"--- stdout ---\n{r.stdout[-3000:]}\n--- stderr ---\n{r.stderr[-4000:]}"
        )

    def serve(self, cmd: str) -> None:
        self.stop()
        self.server = subprocess.Popen(
            shlex.split(cmd),
            cwd=self.root,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.log.append(f"   (bg)  {cmd}")
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert self.server.poll() is None, f"{cmd} exited:\n{self.server.stderr.read()}"
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.5)
        raise AssertionError(f"{cmd} did not listen on port {self.port} within 180 s")

    def ensure_server_for(self, cmd: str) -> None:
        """An ``openai:NAME@URL`` policy with no server of the README's up: serve the
        random-weight preset as NAME (the README says any OpenAI-compatible server)."""
        m = re.search(r"openai:([\w.-]+)@http://127\.0\.0\.1:(\d+)", cmd)
        if m and self.server is None:
            self.serve(
                f"agentgym serve --model tiny-qwen2 --served-model-name {m.group(1)} "
                f"--port {self.port}"
            )

    def stop(self) -> None:
        if self.server is not None:
            self.server.terminate()
            try:
                self.server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.server.kill()
            self.server = None


def _listing(folder: Path) -> list[tuple[str, int]]:
    return (
        sorted((str(p), p.stat().st_mtime_ns) for p in folder.rglob("*")) if folder.exists() else []
    )


def _same_run(cmd: str, ran: list[str]) -> bool:
    """Whether ``cmd``, made small, is a command already run, made small (with the same
    scratch port: each folder has its own)."""
    return any(shrink(done, 0) == shrink(cmd, 0) for done in ran)


def _not_run(cmd: str) -> str | None:
    return next((why for key, why in NOT_RUN_HERE.items() if key in cmd), None)


def test_the_readme_parser_finds_commands_continuations_and_comments():
    text = (
        "x\n```bash\nagentgym a   # note\nagentgym b \\\n    --c 1   # more\n\n```\n"
        "```python\nprint('#x')\n```\n"
    )
    assert readme_blocks(text) == [
        ("bash", ["agentgym a", "agentgym b --c 1"]),
        ("python", ["print('#x')"]),
    ]
    assert _strip_comment("agentgym t 'run.report_to=[a, b]'  # c") == (
        "agentgym t 'run.report_to=[a, b]'  "
    )
    small = shrink("agentgym train configs/apo_balanced_math.yaml run.max_steps=12", 1)
    assert small.startswith("agentgym train configs/apo_balanced_math.yaml run.max_steps=3 ")
    assert "rollout.group_size" not in small  # 1 in that config: never raised
    assert "rollout.batch_tasks=2" in small and "eval.num_tasks=2" in small


@pytest.mark.slow
@pytest.mark.docker
def test_every_readme_command_runs_in_order(tmp_path):
    before = _listing(REPO / "runs")
    readme = (REPO / "README.md").read_text()
    blocks = readme_blocks(readme)
    scratch = Scratch(tmp_path)
    headers: Scratch | None = None
    ran, skipped = [], []
    try:
        for lang, commands in blocks:
            if lang == "python":
                (code,) = commands
                if "..." in code:  # a fragment (TRL's GRPOTrainer around the adapter)
                    skipped.append(code.splitlines()[0])
                    continue
                (tmp_path / "snippet.py").write_text(code)
                scratch.run(".venv/bin/python snippet.py")
                continue
            if lang != "bash":
                continue
            for cmd in commands:
                if _not_run(cmd):
                    skipped.append(cmd)
                    continue
                scratch.run(shrink(cmd, scratch.port))  # stdin is empty: `play` quits
                ran.append(cmd)
            scratch.stop()  # a server lives for its own block
        # the config headers are recipes of their own: a folder of their own, which has
        # the warm start the README made (its command is the same: not run twice; nor is
        # a header command that, made small, is a README command made small, e.g.
        # `agentgym train configs/vapo_balanced_math.yaml`: it would redo that run alone)
        headers = Scratch(tmp_path / "headers", log=scratch.log)
        (headers.root / "runs" / "quickstart").mkdir(parents=True)
        (headers.root / "runs" / "quickstart" / "sft").symlink_to(tmp_path / "runs/quickstart/sft")
        for config in sorted((REPO / "configs").glob("*.yaml")):
            for cmd in config_header_commands(config):
                if _not_run(cmd):
                    skipped.append(cmd)
                elif _same_run(cmd, ran):
                    headers.log.append(f"  (same)  {cmd}")
                else:
                    headers.run(shrink(cmd, headers.port))
                    ran.append(cmd)
    finally:  # a server either folder started dies with the test
        for folder in (scratch, headers):
            if folder is not None:
                folder.stop()
        print("\n".join(scratch.log))
    for key in NOT_RUN_HERE:  # each stated exception still names a command that exists
        assert any(key in c for c in skipped), f"NOT_RUN_HERE names {key!r}: no such command"
    assert _listing(REPO / "runs") == before  # the checkout's run folders: untouched
    assert len(ran) >= 20


# ---------------------------------------------------------------------- after the quickstart
def _output_dir(cmd: str) -> str | None:
    """Where an ``agentgym train`` / ``agentgym sft`` command writes its run."""
    words = cmd.split()
    given = next((w.split("=", 1)[1] for w in words if w.startswith("run.output_dir=")), None)
    if given is not None:
        return given.rstrip("/")
    config = next((w for w in words if w.endswith(".yaml")), None)
    if config is None:
        return None
    return (yaml.safe_load((REPO / config).read_text()).get("run") or {}).get("output_dir")


def _quickstart_folders() -> set[str]:
    """The run folders ``scripts/quickstart.sh`` leaves (with its default RUN_DIR)."""
    text = (REPO / "scripts" / "quickstart.sh").read_text()
    run_dir = re.search(r'RUN_DIR="\$\{RUN_DIR:-([^}]+)\}"', text).group(1)
    found = re.findall(r"run\.output_dir=\$RUN_DIR/(\w+)", text)
    assert found, "the quickstart's stages name their run folders"
    return {f"{run_dir}/{name}" for name in found}


def test_the_readme_commands_work_after_the_quickstart_too():
    """After the quickstart its stages' folders hold runs: a README (or docs) command that
    starts a run there would be refused ("already holds a run"), so each run command
    writes a folder of its own, or continues the quickstart's with --resume-if-present."""
    taken = _quickstart_folders()
    assert taken == {"runs/quickstart/sft", "runs/quickstart/dapo"}
    clash = []
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    for lang, commands in (b for page in pages for b in readme_blocks(page.read_text())):
        if lang not in ("bash", "text"):
            continue
        if lang == "text":  # an unmarked block: its command lines, as a shell block's
            commands = shell_commands(commands[0].splitlines())
        for cmd in commands:
            if not cmd.startswith(("agentgym train ", "agentgym sft ")) or "--print" in cmd:
                continue
            if _output_dir(cmd) in taken and "--resume" not in cmd:  # or --resume-if-present
                clash.append(cmd)
    assert not clash, clash


def test_the_readme_says_what_has_not_run():
    readme = (REPO / "README.md").read_text()
    assert "## What runs today" in readme
    section = readme.split("## What runs today")[1].split("\n## ")[0]
    assert "671B" in section and "has not run on GPUs" in section


def test_the_serve_example_asks_in_the_trained_tasks_format():
    """docs/integrations.md serves the quickstart's model: its example prompt must be one
    the model was trained on (a tiny model answers its own task's format only)."""
    import gymnasium as gym

    import agentgym  # noqa: F401 - registers the envs

    kwargs = yaml.safe_load((REPO / "configs" / "quickstart_sft.yaml").read_text())["envs"][0]
    env = gym.make(kwargs["id"], **kwargs["kwargs"])
    prompts = [env.reset(seed=s)[0][-1].content for s in range(20)]
    env.close()
    shape = re.compile(r"Compute \d+ [-+*] \d+\.")
    assert all(shape.fullmatch(p) for p in prompts), prompts
    page = (REPO / "docs" / "integrations.md").read_text()
    section = page.split("## `agentgym serve`")[1].split("\n## ")[0]
    asked = re.findall(r'"content": "([^"]+)"', section)
    assert asked and all(shape.fullmatch(a) for a in asked), asked
    assert "Answer: 42" in section  # its real output is shown


def test_the_memory_demo_figures_agree_and_say_where_they_came_from():
    """The README's demo line gives the demo's measured seed-0 recall, as its script's
    header and docs/trainer.md do, and its time on an idle and on a loaded machine (a
    time alone, '~3 min', did not say which)."""
    line = next(
        x for x in (REPO / "README.md").read_text().split("```bash") if "memory_recall_demo" in x
    )
    line = line.split("memory_recall_demo.sh", 1)[1].split("\n\n")[0].split("```")[0]
    recall = re.search(r"(\d+\.\d)% -> (\d+\.\d)%", line)
    assert recall, line
    header = (REPO / "scripts" / "memory_recall_demo.sh").read_text().split("set -euo")[0]
    assert re.search(r"(\d+\.\d)% -> (\d+\.\d)%", header).group(0) == recall.group(0)
    assert recall.group(0) in (REPO / "docs" / "trainer.md").read_text()
    assert "idle" in line and "load" in line, line


def test_the_quickstart_figure_is_one_figure_everywhere():
    """The README's quickstart before/after figure (accuracy and tokens, with its seed and
    the spread over seeds) is the one docs/trainer.md and both config headers state:
    three documents once gave three different figures."""

    def flat(text: str) -> str:  # line breaks and comment marks aside
        return " ".join(line.lstrip("# ") for line in text.splitlines()).replace("  ", " ")

    readme = flat((REPO / "README.md").read_text().split("The quickstart warm-starts", 1)[1])
    readme = readme.split("drops each non-answer line", 1)[0]
    acc = re.search(r"accuracy \d+\.\d% -> \d+\.\d% \(\d\.\d\dx\)", readme)
    tokens = re.search(r"tokens \d+\.\d -> \d+\.\d \(\d\.\d\dx\)", readme)
    assert acc and tokens, readme
    assert all(w in readme.lower() for w in ("seed 0", "seeds 0, 1, 2", "load")), readme
    docs = flat((REPO / "docs" / "trainer.md").read_text().split("* Quickstart (", 1)[1])
    docs = docs.split("* `benchmarks/perf/trainer.py`", 1)[0]
    for name, text in [
        ("docs/trainer.md", docs),
        *(
            (f"configs/{c}", flat((REPO / "configs" / c).read_text().split("\nrun:")[0]))
            for c in ("quickstart_sft.yaml", "quickstart_dapo.yaml")
        ),
    ]:
        assert acc.group(0) in text and tokens.group(0) in text, (name, acc.group(0), text)
