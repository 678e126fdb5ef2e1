def test_add_search_and_tag_filter(app, page):
    app.post("/api/bookmarks", {"url": "https://sqlite.org", "title": "SQLite docs", "tags": ["db"]})
    page.goto(app.url + "/")
    page.wait_count("#list li.bookmark", 1)
    page.fill("#url", "https://python.org")
    page.fill("#title", "Python")
    page.fill("#tags", "lang, Code")
    page.click("#add")
    page.wait_count("#list li.bookmark", 2)
    assert page.texts("#list li.bookmark a.title") == ["Python", "SQLite docs"]
    assert page.attr("#list li.bookmark a.title", "href") == "https://python.org"
    page.wait(lambda: page.texts("#tags-bar button.tag") == ["code", "db", "lang"], "the tag bar")
    page.fill("#search", "sql")
    page.wait(lambda: page.texts("#list li.bookmark a.title") == ["SQLite docs"], "search results")
    page.fill("#search", "")
    page.wait_count("#list li.bookmark", 2)
    page.click("#tags-bar button.tag:nth-child(3)")
    page.wait(lambda: page.texts("#list li.bookmark a.title") == ["Python"], "the lang tag's bookmarks")


def test_duplicate_and_delete_on_the_page(app, page):
    app.post("/api/bookmarks", {"url": "https://x.org", "title": "X", "tags": []})
    page.goto(app.url + "/")
    page.wait_count("#list li.bookmark", 1)
    page.fill("#url", "https://x.org")
    page.fill("#title", "Again")
    page.click("#add")
    page.wait_for("#error")
    page.click("#list li.bookmark button.delete")
    page.wait_count("#list li.bookmark", 0)
    assert app.get("/api/bookmarks").json() == []
