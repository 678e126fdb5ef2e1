def html(text):
    from mdconv.render import to_html

    return to_html(text)


def test_headings():
    assert html("### Title ##  \n###### six\n####### seven") == (
        "<h3>Title</h3>\n<h6>six</h6>\n<p>####### seven</p>\n"
    )
    assert html("#nospace") == "<p>#nospace</p>\n"


def test_paragraph_lines_and_blank_separation():
    assert html("  one\ntwo  \n\n\nthree\r\n") == "<p>one\ntwo</p>\n<p>three</p>\n"


def test_fenced_code():
    text = "```python\nx = 1 < 2\n\n  *not em*\n```\nafter"
    assert html(text) == (
        '<pre><code class="language-python">x = 1 &lt; 2\n\n  *not em*\n</code></pre>\n'
        "<p>after</p>\n"
    )
    assert html("```\nopen") == "<pre><code>open\n</code></pre>\n"


def test_rule_and_lists():
    text = "- a\n* **b**\n---\n3. x\n4. y\n1. z\n- c"
    assert html(text) == (
        "<ul>\n<li>a</li>\n<li><strong>b</strong></li>\n</ul>\n<hr />\n"
        '<ol start="3">\n<li>x</li>\n<li>y</li>\n<li>z</li>\n</ol>\n'
        "<ul>\n<li>c</li>\n</ul>\n"
    )
    assert html("1. only") == "<ol>\n<li>only</li>\n</ol>\n"


def test_paragraph_ends_at_block_start():
    assert html("para\n# head\nmore\n- item") == (
        "<p>para</p>\n<h1>head</h1>\n<p>more</p>\n<ul>\n<li>item</li>\n</ul>\n"
    )


def test_blockquote_nested_blocks():
    text = "> # Quote\n> body *em*\n>\n> - x\nout"
    assert html(text) == (
        "<blockquote>\n<h1>Quote</h1>\n<p>body <em>em</em></p>\n<ul>\n<li>x</li>\n</ul>\n"
        "</blockquote>\n<p>out</p>\n"
    )


def test_empty():
    assert html("") == ""
    assert html("\n  \n") == ""


def test_package_export():
    import mdconv

    assert mdconv.to_html("x") == "<p>x</p>\n"
