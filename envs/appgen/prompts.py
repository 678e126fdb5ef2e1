"""What AppGen shows the agent about a task: the task prompt of each stage, how the app is run.

The task prompt starts every conversation (see :class:`agentgym.ConversationEnv`). For a
staged task it holds the product brief (``spec.md``) and only the *current* request: the
requests of earlier stages, with the preferences stated in them, were shown in earlier
conversations and reach later ones only through the agent's memory and its files.
"""

from __future__ import annotations

from agentgym.envs.appgen.taskset import VISIBLE_TESTS_DIR, AppTask

#: The command the system prompt suggests (and the oracle uses) to run the visible tests.
VISIBLE_TEST_COMMAND = f"python3 -m pytest -qq -p no:cacheprovider {VISIBLE_TESTS_DIR}"

SYSTEM_PROMPT = f"""\
You are a software engineer. You build a small but complete Python application from a \
specification, working in a project directory inside a sandbox, over several turns.

Each reply may contain any number of actions, carried out in order; text outside them is \
ignored, so you may think aloud first:

<write path="pkg/module.py">
...the complete new content of the file...
</write>
<delete path="pkg/old.py"/>
<read path="pkg/module.py"/>
<run>{VISIBLE_TEST_COMMAND}</run>
<submit/>

- write creates or replaces a whole file (there is no partial edit). Paths are relative \
to the project root and use "/".
- run executes a shell command in the project root; its output comes back (long output \
is cut in the middle). Add timeout="SECONDS" to allow more time, up to the task's limit.
- submit ends the episode: the project is graded. Actions after it are ignored.

The sandbox has Python 3 (run it as python3) with its standard library, pytest and \
SQLite; there is no network and no pip. After each turn you see what every action did \
and the project's file tree.

Grading: hidden tests, like the visible ones in {VISIBLE_TESTS_DIR}/ but more thorough, \
run against a copy of your project, with the project root as the working directory and \
on sys.path. Only your source and data files are copied: test files, conftest.py, pytest \
or packaging configuration and interpreter start-up hooks are left out. The reward is \
the share of hidden tests that pass. Follow the specification exactly: names, \
signatures, messages and output formats are tested.

Your context is limited. When it fills up you will be asked for a summary; you then \
continue in a fresh context that holds only the specification, your summary and the \
file tree. Your files are kept. Write summaries that let you carry on: what is done, \
what remains, decisions you made."""


def app_section(task: AppTask) -> str:
    """How the graders start the app, from ``[app]`` and ``[services]``."""
    app = task.app
    if app is None:
        return ""
    lines = [
        "## How your app is run",
        f"The graders start it from the project root with `{app.command}`, as an ordinary "
        "user, with these environment variables:",
        f"- `PORT`: the port to serve HTTP on, on 127.0.0.1 (use {app.port} when it is unset);",
        "- `DATA_DIR`: the directory that holds the app's SQLite database and any other "
        "state it keeps (use `./data` when it is unset; create it when missing). The app "
        "must find its data there again after a restart;",
    ]
    for svc in task.services:
        lines.append(
            f"- `{svc.env}`: the base URL of the {svc.name} service (an HTTP API described "
            "above; it may fail or be slow);"
        )
    lines[-1] = lines[-1].rstrip(";") + "."
    lines.append(
        f"Tests send HTTP requests to the app once `{app.ready_path}` answers"
        + (
            ", and use its pages in a real browser (Chromium): they fill in forms, click "
            "buttons and read what the page shows."
            if app.browser
            else "."
        )
    )
    return "\n".join(lines)


def task_prompt(task: AppTask, stage: int = 0) -> str:
    """The task prompt for (0-based) ``stage``: title, brief, how the app runs, the request."""
    spec = task.spec.strip()
    if spec.startswith("# "):  # the spec's own title: the heading above already says it
        spec = spec.split("\n", 1)[1].strip() if "\n" in spec else ""
    parts = [f"# Task: {task.title}", spec]
    section = app_section(task)
    if section:
        parts.append(section)
    if task.staged:
        n = len(task.stages)
        head = f"## The user's request {stage + 1} of {n}"
        if stage > 0:
            head += (
                "\n(Requests 1 to "
                f"{stage} came in earlier conversations and are not repeated here: what the "
                "user asked for then, preferences included, still holds. Your memory and your "
                "files are what you kept of them.)"
            )
        note = "Submit with <submit/> when this request is done" + (
            "; the user will then come back with the next one." if stage + 1 < n else "."
        )
        parts.append(f"{head}\n\n{task.stages[stage].text.strip()}\n\n{note}")
    return "\n\n".join(parts)


def stage_done_text(task: AppTask, finished: int) -> str:
    """Feedback after the agent submits (0-based) stage ``finished`` of a staged task."""
    n = len(task.stages)
    return (
        f"Request {finished + 1} of {n} is submitted. The user will come back with request "
        f"{finished + 2} in a new conversation, which starts from the product brief, the new "
        "request, your summary and the file tree: the requests so far will not be shown again."
    )
