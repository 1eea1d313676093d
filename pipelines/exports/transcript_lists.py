"""The explorer's transcript lists: each run's highest- and lowest-reward trajectories of its matched window and of
some of its epochs, with the first line of each transcript and a link to its file.

A page holds at most WINDOW_K + WINDOW_K entries per run for its matched window and EPOCH_K + EPOCH_K for each of at
most MAX_EPOCHS epochs with transcripts (evenly spaced, the first and last among them), each first line cut at
FIRST_LINE_CHARS characters: a bounded part of the page whatever the run's length.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pipelines.release.transcripts import content_text, find_messages, loads, read_span
from pipelines.settings import OBJECT_SCHEME

WINDOW_K = 5
EPOCH_K = 3
MAX_EPOCHS = 12
FIRST_LINE_CHARS = 120

# The trajectories the lists show, ranked from the top and from the bottom by reward (ties by epoch and position):
# in each run's matched window (matched_window_values' epochs), and in each chosen epoch of it with transcripts.
LISTS_SQL = f"""
with candidates as (
    select
        t.run_id, t.epoch, t.traj_index, t.trajectory_id, f.reward, f.advantage, t.transcript_path, t.line,
        t.byte_offset, t.byte_length, t.n_messages, t.content_chars, r.release_root
    from trajectory_transcripts as t
    inner join fact_trajectories as f using (run_id, epoch, traj_index)
    inner join dim_runs as r using (run_id)
    where t.transcript_path is not null and isfinite(f.reward)
),

numbered as (
    select
        run_id,
        epoch,
        row_number() over (partition by run_id order by epoch) - 1 as i,
        count(*) over (partition by run_id) as n
    from (select distinct run_id, epoch from candidates)
),

chosen_epochs as (
    select run_id, epoch
    from numbered
    -- evenly spaced: i is kept when it is the nearest of MAX_EPOCHS points spread over 0 .. n - 1
    where n <= {MAX_EPOCHS}
        or i = round(round(i * ({MAX_EPOCHS} - 1) / (n - 1)) * (n - 1) / ({MAX_EPOCHS} - 1))
),

scoped as (
    select candidates.*, 'epoch' as scope, candidates.epoch as scope_epoch
    from candidates semi join chosen_epochs using (run_id, epoch)
    union all by name
    select candidates.*, 'matched' as scope, null as scope_epoch
    from candidates semi join matched_window_values using (run_id, epoch)
),

ranked as (
    select
        *,
        row_number() over (
            partition by run_id, scope, scope_epoch order by reward desc, epoch asc, traj_index asc
        ) as top_rank,
        row_number() over (
            partition by run_id, scope, scope_epoch order by reward asc, epoch asc, traj_index asc
        ) as bottom_rank
    from scoped
)

select * exclude (scope_epoch)
from ranked
where (scope = 'matched' and least(top_rank, bottom_rank) <= {WINDOW_K})
    or (scope = 'epoch' and least(top_rank, bottom_rank) <= {EPOCH_K})
order by run_id, scope, epoch, top_rank
"""


def first_line(release_root: str, source_path: str, offset: int, length: int) -> str | None:
    """The first line of a transcript's first message with content that is not the system's, cut at
    FIRST_LINE_CHARS; None when the record cannot be read (the file gone or changed since the build)."""
    try:
        record = loads(read_span(release_root, source_path, offset, length))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    for message in find_messages(record)[1]:
        if isinstance(message, dict) and message.get("role") != "system":
            text = content_text(message.get("content")).strip()
            if text:
                line = text.split("\n", 1)[0]
                return line if len(line) <= FIRST_LINE_CHARS else line[: FIRST_LINE_CHARS - 1] + "…"
    return ""


def file_link(release_root: str, source_path: str) -> str:
    """The transcript file's address: a file:// URL on a disk, the object's s3:// URL in a bucket."""
    if release_root.startswith(OBJECT_SCHEME):
        return f"{release_root.rstrip('/')}/{source_path}"
    return (Path(release_root) / source_path).as_uri()


_RECORD_PLACE = ("release_root", "transcript_path", "byte_offset", "byte_length")


def transcript_lists(rows: pl.DataFrame) -> dict[str, dict]:
    """Per run: its matched window's lists and each chosen epoch's, each {"top": [...], "bottom": [...]} of entries
    (trajectory id, epoch, reward, advantage, the file and its link, the line, the first line of the transcript),
    from LISTS_SQL's rows."""
    lists: dict[str, dict] = {}
    for row in rows.sort("run_id", "scope", "epoch", "top_rank").iter_rows(named=True):
        entry = {
            "trajectory_id": row["trajectory_id"],
            "epoch": row["epoch"],
            "reward": row["reward"],
            "advantage": row["advantage"] if row["advantage"] == row["advantage"] else None,
            "path": row["transcript_path"],
            "href": file_link(row["release_root"], row["transcript_path"]),
            "line": row["line"],
            "first_line": first_line(*(row[key] for key in _RECORD_PLACE)),
        }
        run = lists.setdefault(row["run_id"], {"matched": {"top": [], "bottom": []}, "epochs": {}})
        if row["scope"] == "matched":
            scope, k = run["matched"], WINDOW_K
        else:
            scope, k = run["epochs"].setdefault(str(row["epoch"]), {"top": [], "bottom": []}), EPOCH_K
        if row["top_rank"] <= k:
            scope["top"].append(entry)
        if row["bottom_rank"] <= k:
            scope["bottom"].append((row["bottom_rank"], entry))
    for run in lists.values():
        for scope in [run["matched"], *run["epochs"].values()]:
            scope["bottom"] = [entry for _, entry in sorted(scope["bottom"], key=lambda ranked: ranked[0])]
    return lists
