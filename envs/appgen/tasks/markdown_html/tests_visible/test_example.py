from mdconv.render import to_html

EXAMPLE = """# Hello *world*

Some `code` and a [link](http://x.y).

- one
- two
"""


def test_spec_example():
    assert to_html(EXAMPLE) == (
        "<h1>Hello <em>world</em></h1>\n"
        '<p>Some <code>code</code> and a <a href="http://x.y">link</a>.</p>\n'
        "<ul>\n<li>one</li>\n<li>two</li>\n</ul>\n"
    )
