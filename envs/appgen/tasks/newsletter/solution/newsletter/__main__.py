import os
import secrets

from . import mailer
from .db import Store
from .web import HttpError, Router, run

router = Router()
store = None


def valid(email):
    if email.count("@") != 1:
        return False
    local, domain = email.split("@")
    return bool(local) and "." in domain.strip(".") and " " not in email


def base_url():
    return f"http://127.0.0.1:{int(os.environ.get('PORT') or 8000)}"


@router.route("POST", "/api/subscribe")
def subscribe(req):
    email = req.json().get("email")
    email = email.strip().lower() if isinstance(email, str) else ""
    if not valid(email):
        raise HttpError(400, "that is not an email address")
    known = store.get(email)
    if known and known[1] == "confirmed":
        raise HttpError(409, "already subscribed")
    token = known[2] if known else secrets.token_urlsafe(16)
    text = f"Please confirm your subscription: {base_url()}/confirm?token={token}"
    try:
        mailer.send(email, "Confirm your subscription", text)
    except mailer.RelayError as e:
        raise HttpError(502, str(e))
    store.add_pending(email, token)
    return (200 if known else 201), {"email": email, "status": "pending"}


@router.route("GET", "/confirm")
def confirm(req):
    if not store.confirm(req.query.get("token", "")):
        return 404, b"<!doctype html><p>Unknown or expired link.</p>", "text/html; charset=utf-8"
    return 200, b"<!doctype html><h1>Subscription confirmed</h1>", "text/html; charset=utf-8"


@router.route("GET", "/api/subscribers")
def subscribers(req):
    return 200, store.all()


@router.route("POST", "/api/issues")
def issues(req):
    data = req.json()
    subject, text = data.get("subject"), data.get("text")
    if not isinstance(subject, str) or not subject.strip() or not isinstance(text, str) or not text.strip():
        raise HttpError(400, "subject and text are required")
    sent, failed = 0, []
    for s in store.all():
        if s["status"] != "confirmed":
            continue
        try:
            mailer.send(s["email"], subject, text)
            sent += 1
        except mailer.RelayError:
            failed.append(s["email"])
    return 200, {"sent": sent, "failed": failed}


if __name__ == "__main__":
    store = Store()
    run(router)
