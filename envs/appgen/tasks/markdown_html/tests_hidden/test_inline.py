def r(text):
    from mdconv.inline import render_inline

    return render_inline(text)


def test_escaping():
    assert r('a < b & "c" > d') == "a &lt; b &amp; &quot;c&quot; &gt; d"


def test_code_span_is_literal():
    assert r("use `a *b* <c>` now") == "use <code>a *b* &lt;c&gt;</code> now"
    assert r("lone ` tick") == "lone ` tick"


def test_strong_and_emphasis():
    assert r("**bold** and *it* and _it2_") == (
        "<strong>bold</strong> and <em>it</em> and <em>it2</em>"
    )
    assert r("**a *b* c**") == "<strong>a <em>b</em> c</strong>"


def test_unmatched_markers_literal():
    assert r("**x") == "**x"
    assert r("2 * 3") == "2 * 3"
    assert r("[x] and [y]") == "[x] and [y]"


def test_links():
    assert r("[the *site*](http://a.b/?q=1&r=2)") == (
        '<a href="http://a.b/?q=1&amp;r=2">the <em>site</em></a>'
    )
