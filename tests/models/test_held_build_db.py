"""A build database held for a whole build: opened once, locked against other processes until the hold ends,
published from the held connection, and its block cache let go between two uses."""

import threading

import duckdb
import pytest
from filelock import FileLock, Timeout
from helpers import record_duckdb_connections

from pipelines.settings import published_path
from pipelines.warehouse_db import DEFAULT_MEMORY_LIMIT, hold_build_db, open_build_db, publish


def test_every_use_inside_a_hold_shares_one_connection_and_the_lock_is_held_until_the_hold_ends(tmp_path, monkeypatch):
    opened = record_duckdb_connections(monkeypatch)
    lock = FileLock(tmp_path / ".build" / "db.lock")
    with hold_build_db(tmp_path):
        assert opened == []  # nothing opened before the first use
        with open_build_db(tmp_path) as con:
            con.execute("create table written (x int)")
            con.execute("insert into written values (1)")
        with pytest.raises(Timeout):
            lock.acquire(timeout=0.1)  # another process (another lock object) waits between two uses
        with open_build_db(tmp_path, read_only=True) as con:
            assert con.execute("select x from written").fetchall() == [(1,)]
        with open_build_db(tmp_path) as con:
            con.execute("insert into written values (2)")
        assert [path for path in opened if path.endswith("build.duckdb")] == [str(tmp_path / ".build" / "build.duckdb")]
    lock.acquire(timeout=0.1)  # free once the hold ends
    lock.release()
    with duckdb.connect(str(tmp_path / ".build" / "build.duckdb"), read_only=True) as con:
        assert con.execute("select x from written order by x").fetchall() == [(1,), (2,)]


def test_a_publication_inside_a_hold_copies_the_held_database_without_waiting_for_its_lock(tmp_path):
    published = []
    with hold_build_db(tmp_path):
        with open_build_db(tmp_path) as con:
            con.execute("create table kept as select range as x from range(5)")
        publisher = threading.Thread(target=lambda: published.append(publish(tmp_path)), daemon=True)
        publisher.start()
        publisher.join(timeout=30)
        assert published == [published_path(tmp_path)]
    with duckdb.connect(str(published[0]), read_only=True) as con:
        assert con.execute("select count(*), sum(x) from kept").fetchone() == (5, 10)


def test_a_held_database_lets_go_of_its_block_cache_between_uses_and_keeps_its_memory_limit(tmp_path):
    with hold_build_db(tmp_path):
        with open_build_db(tmp_path) as con:
            con.execute("create table wide as select repeat(range::varchar, 20) as s from range(1000000)")
        with open_build_db(tmp_path) as con:
            con.execute("select count(distinct s) from wide").fetchall()  # about 50 MB of blocks read
        with open_build_db(tmp_path) as con:
            cached = con.execute("select sum(memory_usage_bytes) from duckdb_memory()").fetchone()[0]
            limit = con.execute("select current_setting('memory_limit')").fetchone()[0]
    assert cached < 20 * 2**20
    with open_build_db(tmp_path, memory_limit=DEFAULT_MEMORY_LIMIT) as con:
        assert limit == con.execute("select current_setting('memory_limit')").fetchone()[0]
