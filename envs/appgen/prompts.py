"""What AppGen shows the agent about a task: the task prompt of each stage, how the app is run.

The task prompt starts every conversation (see :class:`agentgym.ConversationEnv`). For a
staged task it holds the product brief (``spec.md``) and only the *current* request: the
requests of earlier stages, with the preferences stated in them, were shown in earlier
conversations and reach later ones only through the agent's memory and its files.
"""

from __future__ import annotations

from agentgym.envs.appgen.taskset import AppTask


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
