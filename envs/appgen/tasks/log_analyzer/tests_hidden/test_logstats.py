import json
import os
import sys
from datetime import datetime, timezone

from apptest import files, subprocess

ROOT = os.getcwd()

LOG = """\
10.0.0.1 - - [10/Oct/2000:13:55:36 -0700] "GET /a.html HTTP/1.0" 200 100
10.0.0.2 - bob [10/Oct/2000:14:05:00 -0700] "POST /api?id=3 HTTP/1.1" 201 -

10.0.0.1 - - [10/Oct/2000:21:30:00 +0000] "GET /a.html HTTP/1.1" 404 50
this is not a log line
10.0.0.3 - - [10/Oct/2000:22:00:00 +0000] "GET /b.html HTTP/1.1" 500 7
10.0.0.3 - - [32/Oct/2000:22:00:00 +0000] "GET /b.html HTTP/1.1" 500 7
10.0.0.3 - - [10/Oct/2000:22:10:00 +0000] "GET /b.html HTTP/1.1" 304 0
10.0.0.4 - - [10/Oct/2000:22:10:00 +0000] "BROKEN" 200 1
"""


def write(tmp_path):
    path = tmp_path / "access.log"
    files.write_text(path, LOG)
    return str(path)


def test_parse_line_fields():
    from logstats.parse import parse_line

    e = parse_line(
        '  10.0.0.2 - bob [10/Oct/2000:14:05:00 -0700] "POST /api?id=3 HTTP/1.1" 201 -  '
    )
    assert (e.host, e.method, e.path, e.status, e.size) == ("10.0.0.2", "POST", "/api", 201, 0)
    assert e.time == datetime(2000, 10, 10, 21, 5, tzinfo=timezone.utc)  # noqa: UP017


def test_parse_line_rejects():
    from logstats.parse import parse_line

    bad = [
        "",
        '1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" abc 5',
        '1.2.3.4 - - [10/Foo/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 5',
        '1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET /" 200 5',
        '1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200',
    ]
    assert [parse_line(b) for b in bad] == [None] * len(bad)


def test_parse_file_counts_malformed(tmp_path):
    from logstats.parse import parse_file

    entries, malformed = parse_file(write(tmp_path))
    assert len(entries) == 5
    assert malformed == 3


def test_summarize(tmp_path):
    from logstats.parse import parse_file
    from logstats.stats import summarize

    entries, _ = parse_file(write(tmp_path))
    assert summarize(entries, top=2) == {
        "requests": 5,
        "hosts": 3,
        "bytes": 157,
        "status": {"2xx": 2, "3xx": 1, "4xx": 1, "5xx": 1},
        "top_paths": [["/a.html", 2], ["/b.html", 2]],
        "error_rate": 0.4,
    }
    assert summarize([])["error_rate"] == 0.0


def test_filters(tmp_path):
    from logstats.parse import parse_file
    from logstats.stats import filter_entries

    entries, _ = parse_file(write(tmp_path))
    since = datetime(2000, 10, 10, 21, 5, tzinfo=timezone.utc)  # noqa: UP017
    assert len(filter_entries(entries, since=since)) == 4
    assert len(filter_entries(entries, since=since, until=since)) == 1
    assert [e.path for e in filter_entries(entries, method="post")] == ["/api"]
    assert len(filter_entries(entries, status=500)) == 1


def test_per_hour(tmp_path):
    from logstats.parse import parse_file
    from logstats.stats import per_hour

    entries, _ = parse_file(write(tmp_path))
    assert per_hour(entries) == {"2000-10-10T20": 1, "2000-10-10T21": 2, "2000-10-10T22": 2}
    assert list(per_hour(entries)) == sorted(per_hour(entries))


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "logstats", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )


def test_cli(tmp_path):
    path = write(tmp_path)
    out = cli(path, "--since", "2000-10-10T22:00:00+00:00", "--top", "1")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {
        "requests": 2,
        "hosts": 1,
        "bytes": 7,
        "status": {"3xx": 1, "5xx": 1},
        "top_paths": [["/b.html", 2]],
        "error_rate": 0.5,
        "malformed": 3,
    }
    hourly = json.loads(cli(path, "--hourly", "--until", "2000-10-10T21:00:00+00:00").stdout)
    assert hourly == {"2000-10-10T20": 1}
    out = cli(str(tmp_path / "missing.log"))
    assert out.returncode == 1 and out.stderr.startswith("error:")
