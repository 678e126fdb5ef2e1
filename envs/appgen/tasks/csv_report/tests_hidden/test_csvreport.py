import json
import os
import sys

import pytest

from apptest import files, subprocess

ROOT = os.getcwd()
DATA = (
    "region , product, amount,qty\n"
    "north,apple,10,3\n"
    "\n"
    "south,pear,2.5,\n"
    "north,pear,4,1\n"
    "east,plum,,7\n"
)


def write(tmp_path, text, name="data.csv"):
    path = tmp_path / name
    files.write_text(path, text)
    return str(path)


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "csvreport", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )


def test_reader_strips_and_skips_blank_lines(tmp_path):
    from csvreport.reader import read_rows

    rows = read_rows(write(tmp_path, DATA))
    assert len(rows) == 4
    assert rows[1] == {"region": "south", "product": "pear", "amount": "2.5", "qty": ""}


def test_reader_empty_file_is_an_error(tmp_path):
    from csvreport.errors import ReportError
    from csvreport.reader import read_rows

    with pytest.raises(ReportError):
        read_rows(write(tmp_path, ""))


def test_reader_bad_row_names_line(tmp_path):
    from csvreport.errors import ReportError
    from csvreport.reader import read_rows

    with pytest.raises(ReportError, match="line 4"):
        read_rows(write(tmp_path, "a,b\n1,2\n\n3\n"))


def test_summarize_count_sum_avg(tmp_path):
    from csvreport.aggregate import summarize
    from csvreport.reader import read_rows

    rows = read_rows(write(tmp_path, DATA))
    out = summarize(rows, "region", ["count", "sum:amount", "avg:amount"])
    assert out == [
        {"region": "east", "count": 1, "sum_amount": None, "avg_amount": None},
        {"region": "north", "count": 2, "sum_amount": 14, "avg_amount": 7.0},
        {"region": "south", "count": 1, "sum_amount": 2.5, "avg_amount": 2.5},
    ]
    assert isinstance(out[1]["sum_amount"], int)


def test_summarize_min_max_keep_ints():
    from csvreport.aggregate import summarize

    rows = [{"k": "a", "v": "3"}, {"k": "a", "v": "-1"}, {"k": "b", "v": "1.25"}]
    out = summarize(rows, "k", ["min:v", "max:v"])
    assert out == [{"k": "a", "min_v": -1, "max_v": 3}, {"k": "b", "min_v": 1.25, "max_v": 1.25}]
    assert isinstance(out[0]["max_v"], int)


def test_summarize_avg_rounds():
    from csvreport.aggregate import summarize

    rows = [{"k": "a", "v": "1"}, {"k": "a", "v": "1"}, {"k": "a", "v": "2"}]
    assert summarize(rows, "k", ["avg:v"]) == [{"k": "a", "avg_v": 1.33}]


def test_summarize_errors():
    from csvreport.aggregate import summarize
    from csvreport.errors import ReportError

    rows = [{"k": "a", "v": "x1"}]
    with pytest.raises(ReportError, match="v"):
        summarize(rows, "k", ["sum:v"])
    with pytest.raises(ReportError, match="nope"):
        summarize(rows, "nope", ["count"])
    with pytest.raises(ReportError, match="median"):
        summarize(rows, "k", ["median:v"])


def test_render_formats():
    from csvreport.render import render

    rows = [{"k": "a", "n": 2, "x": 1.5, "y": None}]
    assert render(rows, "csv") == "k,n,x,y\na,2,1.50,\n"
    assert (
        render(rows, "markdown")
        == "| k | n | x | y |\n| --- | --- | --- | --- |\n| a | 2 | 1.50 |  |\n"
    )
    assert json.loads(render(rows, "json")) == rows
    assert render([], "json").strip() == "[]"


def test_render_unknown_format():
    from csvreport.errors import ReportError
    from csvreport.render import render

    with pytest.raises(ReportError):
        render([{"a": 1}], "xml")


def test_cli_json_to_file(tmp_path):
    src = write(tmp_path, DATA)
    dest = tmp_path / "out.json"
    out = cli(
        src,
        "--group-by",
        "product",
        "--metric",
        "sum:qty",
        "--format",
        "json",
        "--output",
        str(dest),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""
    assert json.loads(files.read_text(dest)) == [
        {"product": "apple", "sum_qty": 3},
        {"product": "pear", "sum_qty": 1},
        {"product": "plum", "sum_qty": 7},
    ]


def test_cli_default_metric_and_format(tmp_path):
    out = cli(write(tmp_path, DATA), "--group-by", "region")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "| region | count |"
    assert "| north | 2 |" in out.stdout


def test_cli_error_exit_code(tmp_path):
    out = cli(write(tmp_path, DATA), "--group-by", "missing")
    assert out.returncode == 2
    assert out.stderr.startswith("error:")
    assert "missing" in out.stderr
