import os
import subprocess
import sys

from csvreport.reader import read_rows

SALES = "region,product,amount\nnorth,apple,10\nsouth,pear,2.5\nnorth,pear,4\n"


def test_read_rows(tmp_path):
    path = tmp_path / "sales.csv"
    path.write_text(SALES)
    assert read_rows(str(path))[0] == {"region": "north", "product": "apple", "amount": "10"}


def test_cli_example(tmp_path):
    path = tmp_path / "sales.csv"
    path.write_text(SALES)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "csvreport",
            str(path),
            "--group-by",
            "region",
            "--metric",
            "count",
            "--metric",
            "sum:amount",
        ],
        capture_output=True,
        text=True,
        cwd=os.getcwd(),
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == (
        "| region | count | sum_amount |\n| --- | --- | --- |\n"
        "| north | 2 | 14 |\n| south | 1 | 2.50 |\n"
    )
