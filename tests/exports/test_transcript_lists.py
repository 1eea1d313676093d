"""The explorer's transcript lists: which trajectories they hold (ranked here by hand), how many epochs, the first line
read from the file."""

import duckdb
import orjson

from pipelines.exports.transcript_lists import EPOCH_K, LISTS_SQL, MAX_EPOCHS, WINDOW_K, first_line, transcript_lists


def _warehouse(tmp_path, epochs: int, window: range) -> duckdb.DuckDBPyConnection:
    """One run with 8 trajectories an epoch, every one with a transcript in a JSON Lines file per epoch; reward
    (epoch * 7 + position * 3) % 8 / 8, so each epoch's rewards are a permutation of 0, 1/8, ..., 7/8."""
    con = duckdb.connect()
    con.execute("create table dim_runs as select 'run' as run_id, ? as release_root", [str(tmp_path)])
    con.execute(
        "create table fact_trajectories as select 'run' as run_id, e as epoch, i as traj_index, "
        "'t_' || e || '_' || i as trajectory_id, ((e * 7 + i * 3) % 8) / 8 as reward, 0.0 as advantage "
        "from range(?) as a(e), range(8) as b(i)",
        [epochs],
    )
    for epoch in range(epochs):
        lines = [
            orjson.dumps({"trajectory_id": f"t_{epoch}_{i}", "messages": [{"role": "a", "content": f"line {i}\nmore"}]})
            for i in range(8)
        ]
        (tmp_path / f"epoch_{epoch}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    con.execute(
        "create table trajectory_transcripts as select run_id, epoch, traj_index, trajectory_id, "
        "'epoch_' || epoch || '.jsonl' as transcript_path, traj_index + 1 as line, 0 as byte_offset, "
        "0 as byte_length, 1 as n_messages, 10 as content_chars from fact_trajectories"
    )
    for epoch in range(epochs):  # each record's place in its file
        offset = 0
        for i, line in enumerate((tmp_path / f"epoch_{epoch}.jsonl").read_bytes().split(b"\n")[:8]):
            con.execute(
                "update trajectory_transcripts set byte_offset = ?, byte_length = ? where epoch = ? and traj_index = ?",
                [offset, len(line), epoch, i],
            )
            offset += len(line) + 1
    con.execute("create table matched_window_values as select 'run' as run_id, unnest(?) as epoch", [list(window)])
    return con


def test_the_lists_hold_the_extremes_of_the_window_and_of_evenly_spread_epochs(tmp_path):
    con = _warehouse(tmp_path, 30, range(25, 30))
    lists = transcript_lists(con.sql(LISTS_SQL).pl())["run"]
    # 30 epochs, 12 kept: i = round(j * 29 / 11) for j = 0 .. 11.
    assert sorted(map(int, lists["epochs"])) == [round(j * 29 / 11) for j in range(MAX_EPOCHS)]
    assert all(len(scope["top"]) == len(scope["bottom"]) == EPOCH_K for scope in lists["epochs"].values())
    # The window's 40 trajectories by reward, ties by epoch then position.
    rows = [(e, i, ((e * 7 + i * 3) % 8) / 8) for e in range(25, 30) for i in range(8)]
    top = sorted(rows, key=lambda r: (-r[2], r[0], r[1]))[:WINDOW_K]
    bottom = sorted(rows, key=lambda r: (r[2], r[0], r[1]))[:WINDOW_K]
    assert [x["trajectory_id"] for x in lists["matched"]["top"]] == [f"t_{e}_{i}" for e, i, _ in top]
    assert [x["trajectory_id"] for x in lists["matched"]["bottom"]] == [f"t_{e}_{i}" for e, i, _ in bottom]
    entry = lists["matched"]["top"][0]
    assert entry["first_line"] == f"line {top[0][1]}"  # the first line of the first message, read at its place
    assert entry["href"] == (tmp_path / f"epoch_{top[0][0]}.jsonl").as_uri()


def test_a_first_line_is_cut_and_an_unreadable_record_is_none(tmp_path):
    record = orjson.dumps({"messages": [{"role": "system", "content": "s"}, {"role": "a", "content": "x" * 300}]})
    (tmp_path / "r.json").write_bytes(record)
    assert first_line(str(tmp_path), "r.json", 0, len(record)) == "x" * 119 + "…"
    assert first_line(str(tmp_path), "r.json", 5, 10) is None  # not a record: the file changed
    assert first_line(str(tmp_path), "gone.json", 0, 10) is None
