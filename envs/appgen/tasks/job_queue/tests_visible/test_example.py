from jobq.queue import JobQueue


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_enqueue_claim_complete(tmp_path):
    clock = Clock()
    q = JobQueue(str(tmp_path / "q.db"), clock=clock)
    job_id = q.enqueue("email", {"to": "ada"})
    job = q.claim("email")
    assert job["id"] == job_id and job["state"] == "leased" and job["attempts"] == 1
    q.complete(job_id)
    assert q.get(job_id)["state"] == "done"
    q.close()
