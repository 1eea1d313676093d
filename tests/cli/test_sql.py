"""`grpo-warehouse sql`: read-only queries against a published warehouse file, in three formats."""

import csv
import io
import json
import subprocess
import sys

import duckdb
import pytest

from pipelines.cli import main


@pytest.fixture
def warehouse(tmp_path):
    with duckdb.connect(str(tmp_path / "warehouse.duckdb")) as con:
        con.execute("create table runs as select * from (values ('a', 1.5, [1, 2]), ('b', null, [])) t(run_id, x, ids)")
    return tmp_path


def test_csv_writes_nested_columns_as_json_text(warehouse, capsys):
    assert main(["sql", "select * from runs order by run_id", "--warehouse", str(warehouse), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert rows == [{"run_id": "a", "x": "1.5", "ids": "[1,2]"}, {"run_id": "b", "x": "", "ids": "[]"}]


def test_json_is_a_list_of_records(warehouse, capsys):
    assert (
        main(["sql", "select run_id, x from runs order by run_id", "--warehouse", str(warehouse), "--format", "json"])
        == 0
    )
    assert json.loads(capsys.readouterr().out) == [{"run_id": "a", "x": 1.5}, {"run_id": "b", "x": None}]


def test_table_shows_columns_and_rows(warehouse, capsys):
    assert main(["sql", "select run_id from runs order by run_id", "--warehouse", str(warehouse)]) == 0
    out = capsys.readouterr().out
    assert "run_id" in out and "│ a " in out and "│ b " in out


def test_missing_warehouse_and_bad_sql_exit_2_with_one_line(tmp_path, warehouse, capsys):
    assert main(["sql", "select 1", "--warehouse", str(tmp_path / "nowhere")]) == 2
    assert "grpo-warehouse build" in capsys.readouterr().err
    assert main(["sql", "select * from no_such_table", "--warehouse", str(warehouse)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("grpo-warehouse sql: Catalog Error: Table with name no_such_table does not exist")
    assert "Traceback" not in err


# DuckDB's whole error, not only its first line: what it suggests and where in the query it went wrong.
ERRORS = {
    "select * from rnus": ['Did you mean "runs"?'],
    "select run_di from runs": ['Candidate bindings: "run_id"'],
    "selec 1": ["LINE 1: selec 1", "        ^^^^^"],
}


@pytest.mark.parametrize("query", ERRORS)
def test_an_error_shows_duckdbs_hints_and_caret_without_a_traceback(warehouse, capsys, query):
    assert main(["sql", query, "--warehouse", str(warehouse)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    lines = err.splitlines()
    assert lines[0].startswith("grpo-warehouse sql: ") and "Error: " in lines[0]
    assert all(line in lines for line in ERRORS[query]), err


# Each type as DuckDB's text of it, worked out by hand: integers too wide for 64 bits and decimals keep every digit.
WIDE = [
    ("123456789012345678::hugeint", "123456789012345678"),
    ("(-170141183460469231731687303715884105728)::hugeint", str(-(2**127))),
    ("340282366920938463463374607431768211455::uhugeint", str(2**128 - 1)),
    ("123456789012345.678::decimal(18, 3)", "123456789012345.678"),
]
TEXT = [
    ("interval 3 day + interval 2 hour", "3 days 02:00:00"),
    ("'done'::variant", "done"),
    ("'infinity'::date", "infinity"),
    ("'12:00:00+01'::timetz", "12:00:00+01"),
]


@pytest.mark.parametrize(("expression", "text"), WIDE + TEXT)
def test_every_type_prints_exactly_in_every_format(warehouse, capsys, expression, text):
    query = f"select {expression} as v from range(2)"
    assert main(["sql", query, "--warehouse", str(warehouse), "--format", "csv"]) == 0
    assert capsys.readouterr().out == f"v\n{text}\n{text}\n"
    assert main(["sql", query, "--warehouse", str(warehouse), "--format", "json"]) == 0
    value = int(text) if "." not in text and text.lstrip("-").isdigit() else text
    records = json.loads(capsys.readouterr().out, parse_float=str)  # a decimal's digits as written
    assert records == [{"v": value}, {"v": value}]
    assert main(["sql", query, "--warehouse", str(warehouse)]) == 0
    assert [line.strip("│ ") for line in capsys.readouterr().out.splitlines()[4:6]] == [text, text]


def test_json_reads_the_row_even_with_a_column_named_like_it(warehouse, capsys):
    query = """select 1 as "row", 'NaN' as "row_", 'nan'::double as x"""
    assert main(["sql", query, "--warehouse", str(warehouse), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"row": 1, "row_": "NaN", "x": "NaN"}]


def test_a_query_loads_neither_dagster_nor_polars(warehouse):
    """The query path starts in a fraction of a second because it imports only DuckDB: the table format needs
    nothing else (csv goes through polars, and loads it then)."""
    script = (
        "import sys\n"
        "from pipelines.cli import main\n"
        f"assert main(['sql', 'select count(*) from runs', '--warehouse', {str(warehouse)!r}]) == 0\n"
        "print(sorted(m for m in ('dagster', 'polars', 'matplotlib', 'pipelines.warehouse_db') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_json_keeps_nan_and_infinities_apart_from_null(warehouse, capsys):
    query = (
        "select * from (values (1, 'nan'::double, ['inf'::double, 1.0]), (2, 'inf'::double, []),"
        " (3, '-inf'::double, [null]), (4, null, null), (5, 2.5, [2.0])) t(k, x, xs) order by k"
    )
    assert main(["sql", query, "--warehouse", str(warehouse), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"k": 1, "x": "NaN", "xs": ["Infinity", 1.0]},
        {"k": 2, "x": "Infinity", "xs": []},
        {"k": 3, "x": "-Infinity", "xs": [None]},
        {"k": 4, "x": None, "xs": None},
        {"k": 5, "x": 2.5, "xs": [2.0]},
    ]


def test_several_statements_each_print_as_tables_and_are_refused_in_one_result_formats(warehouse, capsys):
    query = "select 'first' as one; select 'second' as two"
    assert main(["sql", query, "--warehouse", str(warehouse)]) == 0
    out = capsys.readouterr().out
    assert "-- statement 1: select 'first' as one;" in out and "│ first   │" in out
    assert "-- statement 2: select 'second' as two" in out and "│ second  │" in out
    for output_format in ("csv", "json"):
        assert main(["sql", query, "--warehouse", str(warehouse), "--format", output_format]) == 2
        assert capsys.readouterr().err == (
            f"grpo-warehouse sql: --format {output_format} prints one result, and the query holds 2 statements: run "
            "them one at a time, or with --format table\n"
        )


@pytest.mark.parametrize("query", ["", "   \n\t", ";", " ; ; ", "-- only a comment"])
def test_a_query_with_no_statement_is_refused_on_one_line(warehouse, capsys, query):
    assert main(["sql", query, "--warehouse", str(warehouse)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == 'grpo-warehouse sql: the query is empty: give a SQL statement, e.g. "select * from run_summary"\n'


def test_a_max_rows_beyond_64_bits_shows_every_row(warehouse, capsys):
    argv = ["sql", "select run_id from runs order by run_id", "--max-rows", str(2**70), "--warehouse", str(warehouse)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "│ a " in captured.out and "│ b " in captured.out and captured.err == ""
