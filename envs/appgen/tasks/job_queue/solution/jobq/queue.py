"""The queue: enqueue, claim with a lease, complete, fail with backoff."""

import json
import time

from jobq.errors import QueueError
from jobq.store import connect

STATES = ("ready", "leased", "done", "dead")


class JobQueue:
    def __init__(self, path, clock=None, lease_seconds=30, max_attempts=3, backoff_base=2.0):
        self.conn = connect(path)
        self.clock = clock or time.time
        self.lease_seconds = lease_seconds
        self.max_attempts = max_attempts
        self.backoff_base = backoff_base

    def close(self):
        self.conn.close()

    @staticmethod
    def _job(row):
        return {
            "id": row["id"],
            "queue": row["queue"],
            "payload": json.loads(row["payload"]),
            "state": row["state"],
            "attempts": row["attempts"],
            "available_at": row["available_at"],
            "error": row["error"],
        }

    def _row(self, job_id):
        row = self.conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise QueueError(f"no job with id {job_id}")
        return row

    def enqueue(self, queue, payload, delay=0):
        if not isinstance(queue, str) or not queue:
            raise QueueError("the queue name must be a non-empty string")
        if delay < 0:
            raise QueueError("delay must be >= 0")
        try:
            data = json.dumps(payload)
        except (TypeError, ValueError) as e:
            raise QueueError(f"the payload is not JSON-serialisable: {e}") from None
        cur = self.conn.execute(
            "INSERT INTO jobs (queue, payload, state, available_at) VALUES (?, ?, 'ready', ?)",
            (queue, data, self.clock() + delay),
        )
        return cur.lastrowid

    def claim(self, queue):
        now = self.clock()
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            row = self.conn.execute(
                "SELECT * FROM jobs WHERE queue = ? AND state IN ('ready', 'leased') "
                "AND available_at <= ? ORDER BY available_at, id LIMIT 1",
                (queue, now),
            ).fetchone()
            if row is None:
                self.conn.execute("COMMIT")
                return None
            self.conn.execute(
                "UPDATE jobs SET state = 'leased', attempts = attempts + 1, available_at = ? "
                "WHERE id = ?",
                (now + self.lease_seconds, row["id"]),
            )
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        return self.get(row["id"])

    def _leased(self, job_id):
        row = self._row(job_id)
        if row["state"] != "leased" or row["available_at"] <= self.clock():
            raise QueueError(f"job {job_id} is not leased (state {row['state']})")
        return row

    def complete(self, job_id):
        self._leased(job_id)
        self.conn.execute("UPDATE jobs SET state = 'done' WHERE id = ?", (job_id,))

    def fail(self, job_id, error):
        row = self._leased(job_id)
        if row["attempts"] >= self.max_attempts:
            self.conn.execute(
                "UPDATE jobs SET state = 'dead', error = ? WHERE id = ?", (error, job_id)
            )
        else:
            when = self.clock() + self.backoff_base ** row["attempts"]
            self.conn.execute(
                "UPDATE jobs SET state = 'ready', error = ?, available_at = ? WHERE id = ?",
                (error, when, job_id),
            )

    def get(self, job_id):
        return self._job(self._row(job_id))

    def stats(self, queue):
        now = self.clock()
        counts = dict.fromkeys(STATES, 0)
        for row in self.conn.execute(
            "SELECT state, available_at FROM jobs WHERE queue = ?", (queue,)
        ):
            state = row["state"]
            if state == "leased" and row["available_at"] <= now:
                state = "ready"
            counts[state] += 1
        return counts

    def dead(self, queue):
        rows = self.conn.execute(
            "SELECT * FROM jobs WHERE queue = ? AND state = 'dead' ORDER BY id", (queue,)
        )
        return [self._job(r) for r in rows]

    def retry_dead(self, job_id):
        row = self._row(job_id)
        if row["state"] != "dead":
            raise QueueError(f"job {job_id} is not dead (state {row['state']})")
        self.conn.execute(
            "UPDATE jobs SET state = 'ready', attempts = 0, available_at = ? WHERE id = ?",
            (self.clock(), job_id),
        )
