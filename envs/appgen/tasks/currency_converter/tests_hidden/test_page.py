def test_convert_on_the_page(app, page):
    page.goto(app.url + "/")
    page.wait(lambda: page.count("#from option") == 4, "currencies in #from")
    page.fill("#amount", "100")
    page.select("#from", "EUR")
    page.select("#to", "USD")
    page.click("#convert")
    page.wait_text("#result", "100.00 EUR = 110.00 USD")
    assert not page.visible("#stale")
    page.wait_text("#history li", "100.00 EUR = 110.00 USD")


def test_stale_notice(app, page, services):
    app.stop()
    app.extra_env["RATES_MAX_AGE"] = "0"
    app.start()
    app.get("/api/convert?amount=1&from=GBP&to=EUR")
    page.goto(app.url + "/")
    page.wait(lambda: page.count("#to option") == 4, "currencies in #to")
    services["rates"].fail(503)
    page.fill("#amount", "2")
    page.select("#from", "GBP")
    page.select("#to", "EUR")
    page.click("#convert")
    page.wait_text("#result", "2.00 GBP = 2.36 EUR")
    page.wait_for("#stale")
    page.select("#from", "USD")
    page.click("#convert")
    page.wait_for("#error")
