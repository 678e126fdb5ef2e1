import pytest


def test_encode_decode():
    from shortener.codes import decode, encode

    assert [encode(0), encode(61), encode(62), encode(62 * 62)] == ["0", "Z", "10", "100"]
    for n in (0, 1, 61, 62, 3843, 10**12):
        assert decode(encode(n)) == n
    with pytest.raises(ValueError):
        encode(-1)
    with pytest.raises(ValueError):
        decode("ab!")
    with pytest.raises(ValueError):
        decode("")


def test_validation():
    from shortener.codes import is_valid_code, is_valid_url

    assert is_valid_code("a-b_C9")
    assert not is_valid_code("")
    assert not is_valid_code("x" * 33)
    assert not is_valid_code("a b")
    assert not is_valid_code("api")
    assert is_valid_url("https://example.com/x?y=1")
    assert is_valid_url("http://localhost:8000")
    assert not is_valid_url("ftp://example.com")
    assert not is_valid_url("https://")
    assert not is_valid_url("example.com")


def test_store_crud_and_persistence(tmp_path):
    from shortener.store import ConflictError, LinkStore

    path = str(tmp_path / "s.db")
    s = LinkStore(path)
    a = s.create("https://a.example")
    b = s.create("https://b.example", code="bee")
    assert a["code"] != b["code"]
    assert b == {"code": "bee", "url": "https://b.example", "hits": 0}
    with pytest.raises(ConflictError):
        s.create("https://c.example", code="bee")
    with pytest.raises(ValueError):
        s.create("nope")
    with pytest.raises(ValueError):
        s.create("https://c.example", code="bad code")
    s.hit("bee")
    s.hit("bee")
    s.close()
    s = LinkStore(path)
    assert s.get("bee")["hits"] == 2
    assert [link["code"] for link in s.list()] == [a["code"], "bee"]
    assert s.delete("bee") is True
    assert s.delete("bee") is False
    assert s.get("bee") is None
    s.close()


def test_generated_codes_unique(tmp_path):
    from shortener.codes import is_valid_code
    from shortener.store import LinkStore

    s = LinkStore(str(tmp_path / "s.db"))
    s.create("https://x.example", code="2")
    s.create("https://x.example", code="3")
    codes = [s.create(f"https://x.example/{i}")["code"] for i in range(20)]
    assert all(type(c) is str for c in codes)
    codes = set(codes)
    assert len(codes) == 20
    assert not codes & {"2", "3"}
    assert all(is_valid_code(c) for c in codes)
    s.close()
