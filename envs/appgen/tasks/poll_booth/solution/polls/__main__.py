from .db import Store
from .web import HttpError, Router, run

router = Router()
store = None


def poll_id(req):
    try:
        return int(req.params["pid"])
    except ValueError:
        raise HttpError(404, "no such poll")


@router.route("POST", "/api/polls")
def create(req):
    data = req.json()
    question = data.get("question")
    options = data.get("options")
    if not isinstance(question, str) or not 1 <= len(question.strip()) <= 120:
        raise HttpError(400, "the question must have 1 to 120 characters")
    if not isinstance(options, list) or not 2 <= len(options) <= 8:
        raise HttpError(400, "a poll has 2 to 8 options")
    cleaned = []
    for o in options:
        if not isinstance(o, str) or not 1 <= len(o.strip()) <= 60:
            raise HttpError(400, "each option must have 1 to 60 characters")
        cleaned.append(o.strip())
    if len({o.lower() for o in cleaned}) != len(cleaned):
        raise HttpError(400, "options must be different")
    return 201, store.create(question.strip(), cleaned)


@router.route("GET", "/api/polls")
def listing(req):
    return 200, store.all()


@router.route("GET", "/api/polls/<pid>")
def one(req):
    poll = store.get(poll_id(req))
    if poll is None:
        raise HttpError(404, "no such poll")
    return 200, poll


@router.route("POST", "/api/polls/<pid>/vote")
def vote(req):
    option = req.json().get("option")
    if not isinstance(option, int) or isinstance(option, bool):
        raise HttpError(400, "option must be an index")
    try:
        poll = store.vote(poll_id(req), option)
    except IndexError:
        raise HttpError(400, "no such option")
    if poll is None:
        raise HttpError(404, "no such poll")
    return 200, poll


if __name__ == "__main__":
    store = Store()
    run(router)
