"""The to-do service: every operation on tasks."""

from todo.db import connect
from todo.models import Task, TodoError, check_date, check_priority, clean_title

RANK = {"high": 0, "medium": 1, "low": 2}
STATUSES = ("open", "done", "all")
ORDERS = ("id", "due", "priority")


class TodoService:
    def __init__(self, path):
        self.conn = connect(path)

    def close(self):
        self.conn.close()

    def _tags(self, task_id):
        rows = self.conn.execute("SELECT tag FROM tags WHERE task_id = ? ORDER BY tag", (task_id,))
        return [r["tag"] for r in rows]

    def _task(self, row):
        return Task(
            id=row["id"],
            title=row["title"],
            priority=row["priority"],
            due=row["due"],
            done=bool(row["done"]),
            tags=self._tags(row["id"]),
        )

    def add(self, title, priority="medium", due=None, tags=()):
        title = clean_title(title)
        check_priority(priority)
        due = check_date(due)
        with self.conn:
            cur = self.conn.execute(
                "INSERT INTO tasks (title, priority, due) VALUES (?, ?, ?)", (title, priority, due)
            )
            for tag in sorted({t.strip() for t in tags if t.strip()}):
                self.conn.execute("INSERT INTO tags VALUES (?, ?)", (cur.lastrowid, tag))
        return self.get(cur.lastrowid)

    def get(self, task_id):
        row = self.conn.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).fetchone()
        if row is None:
            raise TodoError(f"no task with id {task_id}")
        return self._task(row)

    def list(self, status="open", tag=None, order="id"):
        if status not in STATUSES:
            raise TodoError(f"status must be one of {', '.join(STATUSES)}")
        if order not in ORDERS:
            raise TodoError(f"order must be one of {', '.join(ORDERS)}")
        rows = self.conn.execute("SELECT * FROM tasks ORDER BY id").fetchall()
        tasks = [self._task(r) for r in rows]
        if status != "all":
            tasks = [t for t in tasks if t.done == (status == "done")]
        if tag is not None:
            tasks = [t for t in tasks if tag in t.tags]
        if order == "due":
            tasks.sort(key=lambda t: (t.due is None, t.due or "", t.id))
        elif order == "priority":
            tasks.sort(key=lambda t: (RANK[t.priority], t.id))
        return tasks

    def _set_done(self, task_id, done):
        self.get(task_id)
        with self.conn:
            self.conn.execute("UPDATE tasks SET done = ? WHERE id = ?", (int(done), task_id))

    def complete(self, task_id):
        self._set_done(task_id, True)

    def reopen(self, task_id):
        self._set_done(task_id, False)

    def delete(self, task_id):
        self.get(task_id)
        with self.conn:
            self.conn.execute("DELETE FROM tasks WHERE id = ?", (task_id,))

    def search(self, text):
        needle = text.lower()
        return [t for t in self.list(status="all") if needle in t.title.lower()]

    def overdue(self, today):
        today = check_date(today)
        late = [t for t in self.list(status="open") if t.due is not None and t.due < today]
        return sorted(late, key=lambda t: (t.due, t.id))
