"""``AppGenEnv``: build a multi-file application from a spec; hidden tests give the reward."""

from __future__ import annotations

import dataclasses
import time
import warnings
from typing import Any, ClassVar

from agentgym import (
    ActResult,
    ConfigError,
    ConversationEnv,
    EnvStateError,
    Message,
    SandboxError,
    Task,
    UnknownNameError,
    count_message_tokens,
)
from agentgym.envs.appgen import protocol
from agentgym.envs.appgen.grading import MAX_FILE_BYTES, MAX_PROJECT_FILES, drop_reason, grade
from agentgym.envs.appgen.prompts import (
    SYSTEM_PROMPT,
    VISIBLE_TEST_COMMAND,
    stage_done_text,
    task_prompt,
)
from agentgym.envs.appgen.sandboxes import (
    DEFAULT_POOL_SIZE,
    GRADING,
    check_sandbox_backend,
    get_pool,
    grading_backend,
    local_refused,
)
from agentgym.envs.appgen.taskset import VISIBLE_TESTS_DIR, AppTask, load_tasks
from agentgym.sandbox import Sandbox, SandboxLimits, SandboxPool

HIDDEN_DIRS = ("__pycache__", ".pytest_cache")
MAX_TREE_ENTRIES = 200


class AppGenEnv(ConversationEnv):
    """Build a small multi-file application from a spec; the share of hidden tests passed is the reward.

    ## Description
    Each episode is one task (see :mod:`agentgym.envs.appgen.taskset`): a specification of
    a small application (several modules, a data layer, a CLI or an HTTP API, persistence
    in SQLite or files), a scaffold the project starts from, visible example tests in
    ``tests/`` and hidden tests. The agent writes the project over many turns inside a
    sandbox, running commands (its tests, its program) as it goes, and submits. The
    episode usually spans several conversations: memory-summary turns are on by default;
    the files persist across conversations, only the context is reset.

    The built-in tasks (12, easy to hard) are listed by
    :func:`agentgym.envs.appgen.taskset.builtin_task_names`. ``reset(seed=s)`` plays task
    ``s % n`` of the (sorted) task list, so seeds ``0..n-1`` cover every task once;
    ``options={"task": name}`` picks a task by name.

    ## Action
    The assistant's reply, holding any number of actions (see
    :mod:`agentgym.envs.appgen.protocol`): ``<write path="...">content</write>``,
    ``<delete path="..."/>``, ``<read path="..."/>``, ``<run>command</run>`` (optional
    ``timeout``), ``<submit/>``. Malformed actions are reported in the next observation;
    they never end the episode. On a summary turn the reply is the memory.

    ## Observation
    The current conversation's messages. The first user message holds the task (title
    and specification) and, in the first conversation, the initial file tree; in later
    conversations the memory and the current file tree (the state digest). Each later user
    message reports, per action, what it did (command output cut to ``output_chars``, file
    content to ``read_chars``), then the file tree with sizes and the turn count.

    ## Rewards
    Terminal only: ``passed / total`` hidden test cases, plus ``completion_bonus`` when
    all pass, minus ``token_cost`` per 1000 policy tokens. The hidden tests run in a
    process the project's code cannot reach (see :mod:`agentgym.envs.appgen.grading`); a
    tampering attempt caught by the grader scores 0 before the token cost. When the
    infrastructure fails under the episode (the sandbox's container dies during a
    ``<run>`` or the grading, the Docker engine stops answering), ``step`` raises
    :class:`agentgym.InfraError` (``reason`` ``"sandbox_died"``, ``"docker_unreachable"``)
    instead of returning a reward: such an episode cannot be scored.
    ``info["reward_breakdown"]``: ``passed``, ``total``, ``pass_rate``, ``per_test``
    (test id -> outcome), ``errors``, ``tampered``, ``dropped_files``, ``bonus``,
    ``token_penalty``, ``task``, ``task_hash``, ``sandbox`` (the backend that graded),
    ``grader_isolated`` (False on the local backend), ``turns``, ``conversations``,
    ``policy_tokens``, ``end_reason``. Every ``info`` also carries ``sandbox``.

    ## Episode end
    Terminated by ``<submit/>``. Truncated at the turn limit (``max_turns``, default from
    the task's ``task.toml``), at ``max_total_tokens`` policy tokens, or when the memory
    config's ``max_conversations`` is used up. The project is graded in every case.

    ## Arguments
    * ``tasks`` (None): task names to play (default: all built-in tasks).
    * ``task_dirs`` (()): extra directories of task directories (they may override
      built-in tasks of the same name).
    * ``sandbox`` ("auto"): ``"docker"``, ``"local"`` or ``"auto"`` (Docker when its
      engine and image are usable). The local backend grades without isolation (the
      project could rewrite the grader), so it needs ``unsafe_local_grading=True``:
      ``"local"`` without it fails at make, ``"auto"`` without Docker at reset, with a
      :class:`~agentgym.ConfigError` that says how to get Docker.
    * ``unsafe_local_grading`` (False): allow the local backend (trusted code only).
    * ``sandbox_limits`` (None): dict of :class:`agentgym.sandbox.SandboxLimits` fields.
    * ``pool_size`` (8): sandboxes in each shared pool of this backend and limits: one
      of agents' workspaces (a fresh container per episode, started in the background),
      one of gradings (reset between gradings); see :mod:`agentgym.envs.appgen.sandboxes`.
    * ``output_chars`` (4000) / ``read_chars`` (20000): caps on command output and file
      content shown per action.
    * ``completion_bonus`` (0.0), ``token_cost`` (0.0): optional reward terms.
    * ``memory``: MemoryConfig or dict; default ``{"enabled": True, "token_budget": 8192,
      "summary_max_tokens": 1024, "every_k_turns": 5, "max_conversations": 16}``: a new
      conversation starts when the prompt would exceed 8192 tokens or after 5 act turns.
    * ``max_turns`` (None: the task's limit), ``max_total_tokens`` (200000),
      ``count_tokens``, ``render_mode``: see :class:`~agentgym.env.ConversationEnv`.

    ## Version history
    * v0: first version, 12 tasks.
    """

    memory_defaults: ClassVar[dict[str, Any]] = {
        "enabled": True,
        "token_budget": 8192,
        "summary_max_tokens": 1024,
        "every_k_turns": 5,
        "max_conversations": 16,
    }

    def __init__(
        self,
        tasks: list[str] | tuple[str, ...] | str | None = None,
        task_dirs: list[str] | tuple[str, ...] = (),
        sandbox: str = "auto",
        sandbox_limits: dict[str, Any] | None = None,
        unsafe_local_grading: bool = False,
        pool_size: int = DEFAULT_POOL_SIZE,
        output_chars: int = 4000,
        read_chars: int = 20_000,
        completion_bonus: float = 0.0,
        token_cost: float = 0.0,
        max_turns: int | None = None,
        max_total_tokens: int | None = 200_000,
        **kwargs: Any,
    ) -> None:
        super().__init__(max_turns=max_turns, max_total_tokens=max_total_tokens, **kwargs)
        if isinstance(tasks, str):
            tasks = [tasks]
        if isinstance(task_dirs, str):
            task_dirs = [task_dirs]
        self.tasks: list[AppTask] = load_tasks(tasks, task_dirs)
        if not self.tasks:
            raise ConfigError("AppGen has no tasks: pass task names or task_dirs with tasks.")
        self.sandbox_backend = check_sandbox_backend(sandbox)
        if not isinstance(unsafe_local_grading, bool):
            raise ConfigError(
                f"unsafe_local_grading must be true or false, got {unsafe_local_grading!r}."
            )
        self.unsafe_local_grading = unsafe_local_grading
        if self.sandbox_backend == "local" and not unsafe_local_grading:
            raise local_refused("local")
        self.sandbox_limits = dict(sandbox_limits or {})
        SandboxLimits.from_kwargs(**self.sandbox_limits)  # validate names and values now
        if not isinstance(pool_size, int) or pool_size < 1:
            raise ConfigError(f"pool_size must be an integer >= 1, got {pool_size!r}.")
        for name, value in (("output_chars", output_chars), ("read_chars", read_chars)):
            if not isinstance(value, int) or value < 200:
                raise ConfigError(f"{name} must be an integer >= 200, got {value!r}.")
        if token_cost < 0 or completion_bonus < 0:
            raise ConfigError("token_cost and completion_bonus must be >= 0.")
        self.pool_size = pool_size
        self.output_chars = output_chars
        self.read_chars = read_chars
        self.completion_bonus = float(completion_bonus)
        self.token_cost = float(token_cost)
        self._user_max_turns = max_turns
        self._app: AppTask | None = None
        self._sandbox: Sandbox | None = None
        self._pool: SandboxPool | None = None  # workspaces (see sandboxes.py)
        self._grading_pool: SandboxPool | None = None
        self._tree: dict[str, int] = {}
        self._oracle_state: dict[str, Any] = {}
        self._check_budget()

    # ------------------------------------------------------------------ task
    @property
    def app_task(self) -> AppTask:
        if self._app is None:
            raise EnvStateError("No task yet: call reset() first.")
        return self._app

    def _pick(self, seed: int | None, options: dict[str, Any] | None) -> AppTask:
        names = [t.name for t in self.tasks]
        wanted = (options or {}).get("task")
        if wanted is not None:
            if wanted not in names:
                raise UnknownNameError("AppGen task", str(wanted), names)
            return self.tasks[names.index(wanted)]
        if seed is not None:
            return self.tasks[seed % len(self.tasks)]
        return self.tasks[int(self.np_random.integers(len(self.tasks)))]

    def _begin(self, seed: int | None, options: dict[str, Any] | None) -> Task:
        self._release()
        app = self._app = self._pick(seed, options)
        self.max_turns = self._user_max_turns or app.limits.max_turns
        self._oracle_state = {"explored": False, "written": [], "tested": False}
        self._commands_seconds = 0.0
        self._stage = 0
        self._stage_pending = False
        start = time.monotonic()
        backend = grading_backend(self.sandbox_backend, self.unsafe_local_grading)
        self._pool = get_pool(backend, self._limits(), self.pool_size)
        self._grading_pool = get_pool(backend, self._limits(), self.pool_size, GRADING)
        if app.app is not None and app.app.browser and self._pool.backend != "docker":
            warnings.warn(
                f"AppGen task {app.name!r} is graded in Chromium, which starts only in the "
                f"Docker sandbox: on the {self._pool.backend} backend its browser tests fail. "
                "Use sandbox='docker' (`agentgym sandbox doctor` says what is missing).",
                stacklevel=3,
            )
        self._sandbox = self._pool.acquire()
        self._sandbox.write_files(app.initial_files())
        self._refresh_tree()
        acquire_seconds = time.monotonic() - start
        prompt = task_prompt(app, 0)
        first = (
            "## Project\nYour project starts with these files (visible example tests are in "
            f"{VISIBLE_TESTS_DIR}/; run them with `{VISIBLE_TEST_COMMAND}`):\n"
            f"{self._tree_text()}\n\nYou have {self.max_turns} turns. Begin."
        )
        self._begin_metrics = {
            "sandbox_backend": self._pool.backend,
            "sandbox_setup_seconds": acquire_seconds,
        }
        return Task(task_id=app.task_id, prompt=prompt, system=SYSTEM_PROMPT, first_message=first)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = super().reset(seed=seed, options=options)
        self.episode_metrics = dict(self._begin_metrics)
        return obs, info

    def _info(self) -> dict[str, Any]:
        info = super()._info()
        info["sandbox"] = self._pool.backend if self._pool is not None else None
        return info

    def _limits(self) -> dict[str, Any]:
        limits: dict[str, Any] = {"timeout": float(self.app_task.limits.command_timeout)}
        limits.update(self.app_task.limits.sandbox())
        limits.update(self.sandbox_limits)
        return limits

    # ------------------------------------------------------------------ acting
    def _act(self, action: str) -> ActResult:
        actions = protocol.parse_actions(action)
        lines: list[str] = []
        submitted = advanced = False
        for i, act in enumerate(actions, start=1):
            if submitted:
                lines.append(f"[{i}] ignored: it comes after <submit/>")
                continue
            if isinstance(act, protocol.Submit):
                submitted = True
                if self._stage + 1 < len(self.app_task.stages):
                    advanced = True
                    lines.append(f"[{i}] submit: " + self._next_stage())
                    continue
                lines.append(f"[{i}] submit: the project will now be graded")
                continue
            lines.append(f"[{i}] " + self._do(act))
        if submitted and not advanced:
            return ActResult(done=True)
        if not actions:
            lines.append(
                "Your reply contained no action. Use <write path=...>...</write>, "
                "<read path=.../>, <delete path=.../>, <run>...</run> or <submit/>."
            )
        self._refresh_tree()
        turn_line = f"Turn {self._turns} of {self.max_turns} done."
        feedback = "\n".join(lines) + f"\n\n## Files\n{self._tree_text()}\n\n{turn_line}"
        return ActResult(feedback=feedback)

    def _next_stage(self) -> str:
        """The agent finished a stage that is not the last: the next request comes in a
        new conversation (or, with memory off, in the next message)."""
        app = self.app_task
        finished = self._stage
        self._stage += 1
        self._task = dataclasses.replace(self.task, prompt=task_prompt(app, self._stage))
        self._stage_pending = True
        text = stage_done_text(app, finished)
        if not self.memory.enabled:
            self._stage_pending = False
            text += "\n\n" + task_prompt(app, self._stage)
        return text

    def _needs_summary(self, conv: Any, feedback: str) -> bool:
        if self._stage_pending and self.memory.enabled:
            self._stage_pending = False
            return True
        return super()._needs_summary(conv, feedback)

    def _do(self, act: protocol.Action) -> str:
        sb = self._sandbox
        try:
            if isinstance(act, protocol.ActionError):
                return f"error: {act.message}"
            if isinstance(act, protocol.Write):
                data = act.content.encode("utf-8")
                if len(data) > MAX_FILE_BYTES:
                    return (
                        f"write {act.path}: error: the file is larger than {MAX_FILE_BYTES} bytes"
                    )
                if act.path not in self._tree and len(self._tree) >= MAX_PROJECT_FILES:
                    return f"write {act.path}: error: the project already has {MAX_PROJECT_FILES} files"
                if act.path in self._dirs():
                    return f"write {act.path}: error: that is a directory"
                sb.write_files({act.path: data})
                self._tree[act.path] = len(data)
                note = ""
                if drop_reason(act.path) and not act.path.startswith(f"{VISIBLE_TESTS_DIR}/"):
                    note = " (note: files like this are not copied for grading)"
                return f"write {act.path}: ok, {len(data)} bytes{note}"
            if isinstance(act, protocol.Read):
                if act.path not in self._tree:
                    return f"read {act.path}: error: no such file{self._did_you_mean(act.path)}"
                text = sb.read_file(act.path)
                shown = _cut(text, self.read_chars)
                return (
                    f"read {act.path} ({len(text.encode())} bytes):\n{shown}\n[end of {act.path}]"
                )
            if isinstance(act, protocol.Delete):
                if act.path not in self._tree:
                    return f"delete {act.path}: error: no such file{self._did_you_mean(act.path)}"
                res = sb.run(["rm", "-f", "--", act.path], timeout=30)
                if res.exit_code != 0:
                    return f"delete {act.path}: error: {res.stderr.strip()[:200]}"
                self._tree.pop(act.path, None)
                return f"delete {act.path}: ok"
            if isinstance(act, protocol.Run):
                limit = float(self.app_task.limits.command_timeout)
                timeout = min(act.timeout or limit, limit)
                start = time.monotonic()
                res = sb.run(act.command, timeout=timeout, env={"PYTHONHASHSEED": "0"})
                self._commands_seconds += time.monotonic() - start
                return self._run_text(act.command, res, timeout)
        except SandboxError as e:  # a bad path the sandbox refused (symlink escape, ...)
            return f"error: {e}"
        except (FileNotFoundError, IsADirectoryError):
            return "error: no such file"
        return "error: unknown action"

    def _run_text(self, command: str, res: Any, timeout: float) -> str:
        head = f"run `{_one_line(command)}`: "
        if res.timed_out:
            head += f"killed after the {timeout:g}s timeout"
        else:
            head += f"exit code {res.exit_code}"
        if getattr(res, "oom_killed", False):
            head += " (out of memory)"
        parts = [head]
        budget = self.output_chars
        for name, text, cut in (
            ("stdout", res.stdout, res.stdout_truncated),
            ("stderr", res.stderr, res.stderr_truncated),
        ):
            if text:
                shown = _cut(text.rstrip("\n"), budget if name == "stdout" else budget // 2)
                if cut:
                    shown += "\n[... output beyond the sandbox's cap was dropped ...]"
                parts.append(f"--- {name} ---\n{shown}")
        if len(parts) == 1:
            parts.append("(no output)")
        return "\n".join(parts)

    def _did_you_mean(self, path: str) -> str:
        import difflib

        close = difflib.get_close_matches(path, list(self._tree), n=1, cutoff=0.6)
        return f" (did you mean {close[0]}?)" if close else ""

    def _dirs(self) -> set[str]:
        out = set()
        for p in self._tree:
            parts = p.split("/")
            out.update("/".join(parts[:i]) for i in range(1, len(parts)))
        return out

    # ------------------------------------------------------------------ file tree
    def _refresh_tree(self) -> None:
        """Paths and sizes of the project's files, read from the sandbox."""
        res = self._sandbox.run(["find", ".", "-type", "f", "-printf", "%s %P\\0"], timeout=30)
        tree: dict[str, int] = {}
        if res.exit_code == 0 and not res.stdout_truncated:
            for item in res.stdout.split("\0"):
                size, _, path = item.partition(" ")
                if path and size.isdigit():
                    tree[path] = int(size)
        else:  # fall back to the protocol's listing (no sizes for unknown files)
            tree = {p: self._tree.get(p, -1) for p in self._sandbox.list_files()}
        self._tree = tree

    def _tree_text(self) -> str:
        shown = sorted(p for p in self._tree if not set(p.split("/")) & set(HIDDEN_DIRS))
        if not shown:
            return "(no files)"
        lines = [
            f"{p} ({self._tree[p]} bytes)" if self._tree[p] >= 0 else p
            for p in shown[:MAX_TREE_ENTRIES]
        ]
        if len(shown) > MAX_TREE_ENTRIES:
            lines.append(f"... and {len(shown) - MAX_TREE_ENTRIES} more files")
        return "\n".join(lines)

    def state_digest(self) -> str | None:
        if self._app is None:
            return None
        return (
            f"Files in the project:\n{self._tree_text()}\n\n"
            f"Turns used: {self._turns} of {self.max_turns}."
        )

    # ------------------------------------------------------------------ scoring
    def _project_files(self) -> dict[str, bytes]:
        files: dict[str, bytes] = {}
        for path in sorted(self._sandbox.list_files()):
            if drop_reason(path):
                continue
            try:
                files[path] = self._sandbox.read_bytes(path)
            except (SandboxError, OSError):
                continue  # too large, vanished or a special file: not part of the project
        return files

    def _score(self, end_reason: str) -> tuple[float, dict[str, Any]]:
        app = self.app_task
        files = self._project_files()
        self._release()
        start = time.monotonic()
        grader = self._grading_pool.acquire()
        try:
            result = grade(app, files, grader, unsafe_local_grading=self.unsafe_local_grading)
        finally:
            self._grading_pool.release(grader)
        self.episode_metrics.update(
            {
                "grade_seconds": time.monotonic() - start,
                "command_seconds": self._commands_seconds,
            }
        )
        bonus = self.completion_bonus if result.total and result.passed == result.total else 0.0
        penalty = self.token_cost * self._policy_tokens / 1000.0
        reward = result.score + (0.0 if result.tampered else bonus) - penalty
        breakdown = {
            "passed": result.passed,
            "total": result.total,
            "pass_rate": result.score,
            "per_test": result.per_test,
            "errors": result.errors,
            "tampered": result.tampered,
            "timed_out": result.timed_out,
            "dropped_files": result.dropped,
            "bonus": 0.0 if result.tampered else bonus,
            "token_penalty": penalty,
            "task": app.name,
            "task_hash": app.content_hash,
            "difficulty": app.difficulty,
            "sandbox": result.backend,
            "grader_isolated": result.isolated,
            "requirements": result.requirements,
            "lost_requirements": result.lost_requirements,
            "stages_submitted": self._stage + (1 if end_reason == "done" else 0),
            "stages": max(1, len(app.stages)),
            "end_reason": end_reason,
            "turns": self._turns,
            "conversations": len(self._conversations),
            "policy_tokens": self._policy_tokens,
        }
        return reward, breakdown

    # ------------------------------------------------------------------ resources
    def _release(self) -> None:
        if self._sandbox is not None:
            sb, self._sandbox = self._sandbox, None
            try:
                self._pool.release(sb)
            except SandboxError:
                pass  # the pool was closed meanwhile

    def close(self) -> None:
        self._release()
        super().close()

    # ------------------------------------------------------------------ oracle
    def oracle_action(self, observation: list[Message]) -> str:
        """The reference solution, written one file per turn, across conversations.

        First turn: read the scaffold and the visible tests. Then one solution file per
        turn in the task's ``[oracle] order``, then one run of the visible tests, then
        submit. Summary turns are answered with what is done and what remains. It keeps
        its progress in the env (it is an oracle), but acts only through the protocol.
        """
        app = self.app_task
        st = self._oracle_state
        last_stage = self._stage + 1 >= len(app.stages)
        staged_now = app.staged and not last_stage
        now = app.stages[self._stage].oracle if staged_now else app.oracle_order
        todo = [p for p in now if p not in st["written"]]
        if self.next_turn_kind == "summary":
            done = ", ".join(st["written"]) or "nothing yet"
            rest = ", ".join(todo) or "nothing"
            after = "run the visible tests and submit" if not st["tested"] else "submit"
            asked = [r.text for r in app.requirements if r.stage <= self._stage + 1]
            keep = (" Requirements the user stated: " + "; ".join(asked) + ".") if asked else ""
            return (
                f"Working on: {app.title}. I read the scaffold and the example tests. "
                f"Files written so far, following the specification: {done}. "
                f"Still to write, in this order: {rest}. Then {after}.{keep}"
            )
        if not st["explored"]:
            st["explored"] = True
            reads = "\n".join(f'<read path="{p}"/>' for p in sorted(app.initial_files()))
            return f"Let me look at the starting files and the example tests first.\n{reads}"
        if todo:
            path = todo[0]
            st["written"].append(path)
            content = app.solution[path].decode("utf-8")
            return f'Next I write {path}.\n<write path="{path}">\n{content}</write>'
        if not last_stage:
            return "This request is done.\n<submit/>"
        if not st["tested"]:
            st["tested"] = True
            return f"All files are written; let me run the example tests.\n<run>{VISIBLE_TEST_COMMAND}</run>"
        return "The project is complete.\n<submit/>"

    # ------------------------------------------------------------------ checks
    def _check_budget(self) -> None:
        """Refuse a memory budget in which a new conversation of some task cannot fit."""
        if not self.memory.enabled:
            return
        worst = None
        for app in self.tasks:
            prompt = max((task_prompt(app, i) for i in range(max(1, len(app.stages)))), key=len)
            tree = "\n".join(
                f"{p} ({len(d)} bytes)" for p, d in sorted(app.reference_files().items())
            )
            opening = [
                Message("system", SYSTEM_PROMPT),
                Message("user", prompt + "\n\n" + tree + "\n\n"),
            ]
            need = (
                count_message_tokens(opening, self.count_tokens)
                + self.memory.summary_max_tokens
                + self.memory.reserve
            )
            if worst is None or need > worst[0]:
                worst = (need, app.name)
        if worst and worst[0] > self.memory.token_budget:
            raise ConfigError(
                f"AppGen: a new conversation of task {worst[1]!r} needs about {worst[0]} tokens "
                f"(system prompt, spec, file tree, memory of up to summary_max_tokens="
                f"{self.memory.summary_max_tokens} and room for the reply), more than "
                f"memory.token_budget={self.memory.token_budget}. Raise the budget or lower "
                "summary_max_tokens."
            )


def _cut(text: str, limit: int) -> str:
    """``text`` if short enough, else its head and tail with a marker in the middle."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 5
    tail = limit - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[... {omitted} characters omitted ...]\n{text[-tail:]}"


def _one_line(command: str, limit: int = 120) -> str:
    line = " ".join(command.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
