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
    assert "no_such_table" in err and "\n" not in err


def test_a_query_loads_neither_dagster_nor_polars(warehouse):
    """The query path starts in a fraction of a second because it imports only DuckDB: the table format needs
    nothing else (csv and json go through polars, and load it then)."""
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
