from logstats.parse import parse_line


def test_parse_example():
    e = parse_line(
        '127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /index.html?x=1 HTTP/1.0" 200 2326'
    )
    assert (e.host, e.method, e.path, e.status, e.size) == (
        "127.0.0.1",
        "GET",
        "/index.html",
        200,
        2326,
    )
    assert e.time.utcoffset().total_seconds() == -7 * 3600
