"""The SQL model tests' fixture: the tiny staging tables of mart_fixture.py with every mart built on them."""

import duckdb
import pytest
from mart_fixture import EPOCHS, RUNS, build_marts, create_staging


@pytest.fixture
def warehouse_con():
    """A DuckDB connection holding the fixture's staging tables and every mart built from them."""
    con = duckdb.connect()
    create_staging(con, EPOCHS, RUNS)
    build_marts(con)
    yield con
    con.close()
