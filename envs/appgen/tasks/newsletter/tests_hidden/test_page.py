def test_subscribe_on_the_page(app, page, services):
    page.goto(app.url + "/")
    page.fill("#email", "eve@example.org")
    page.click("#subscribe")
    page.wait_text("#status", "Check your inbox to confirm.")
    assert services["mail"].calls()[0].json()["to"] == "eve@example.org"
    page.fill("#email", "bad")
    page.click("#subscribe")
    page.wait(lambda: "Check your inbox" not in page.text("#status") and page.text("#status"), "an error")


def test_confirm_link_and_sending(app, page, services):
    import re

    app.post("/api/subscribe", {"email": "fay@example.org"})
    link = re.search(r"http://\S+/confirm\?token=\S+", services["mail"].calls()[0].json()["text"]).group(0)
    page.goto(link)
    page.wait_text("body", "Subscription confirmed")
    page.goto(app.url + "/")
    page.fill("#email", "fay@example.org")
    page.click("#subscribe")
    page.wait_text("#status", "You are already subscribed.")
    page.fill("#issue-subject", "News")
    page.fill("#issue-text", "Hello")
    page.click("#send-issue")
    page.wait_text("#send-result", "Sent to 1 subscribers.")
