"""Transcripts through a whole build: linked to their trajectories, measured per epoch against values worked out by
hand, bad records reported in ingest_errors, and `grpo-warehouse show` printing one, its content as written."""

import duckdb
import orjson
import pytest
from helpers import epoch_document, write_epoch_file

from pipelines.build import _show_example, print_summary
from pipelines.cli import main

# One whole build, which the module's tests read on one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("transcripts_build")]

# run_a's rewards per epoch, by position. Its transcript at position k has k + 1 exchanges: a system message, then
# k + 1 times an auditor message (one tool call) and the target's reply, so 2 (k + 1) turns (runs of one role's
# messages, the system's left out) and k + 1 tool calls.
REWARDS = {0: [0.1, 0.9, 0.5, 0.5, 0.3, 0.7], 1: [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]}


def _audit(trajectory_id: str, exchanges: int, content: str = "probe") -> dict:
    messages = [{"role": "system", "content": "Audit."}]
    for _ in range(exchanges):
        messages.append({"role": "auditor", "content": content, "tool_calls": [{"function": "send_message"}]})
        messages.append({"role": "target", "content": "reply"})
    return {"trajectory_id": trajectory_id, "metadata": {"judge": {"score": exchanges}}, "messages": messages}


def _jsonl(records) -> bytes:
    return b"".join(orjson.dumps(record) + b"\n" for record in records)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("transcripts")
    release = root / "rel"
    for epoch in range(3):  # epoch 2 has no transcripts
        rewards = REWARDS.get(epoch, [0.5] * 6)
        ids = [f"a_{epoch}_{i}" for i in range(6)]
        document = epoch_document(epoch, n=6, trajectory_ids=ids, rewards=rewards, advantages=[0.0] * 6)
        write_epoch_file(release / "run_a", epoch, document)
        if epoch in REWARDS:
            (release / "run_a" / "transcripts").mkdir(exist_ok=True)
            records = [_audit(i, exchanges=k + 1) for k, i in enumerate(ids)]
            if epoch == 1:
                records[0]["messages"][1]["content"] = "plain \x1b[31mred\x1b[0m text, as written"
            (release / "run_a" / "transcripts" / f"epoch_{epoch:03d}.jsonl").write_bytes(_jsonl(records))
    # A record of a trajectory no run has, and a second transcript of a_0_1, in another file.
    (release / "run_a" / "transcripts" / "extra.jsonl").write_bytes(_jsonl([_audit("nobody", 1), _audit("a_0_1", 9)]))
    write_epoch_file(release / "run_b", 0, epoch_document(0, n=2, trajectory_ids=["b_0", "b_1"]), layout="folder")
    (release / "run_b" / "epoch_000" / "transcripts").mkdir()
    (release / "run_b" / "epoch_000" / "transcripts" / "b_1.json").write_bytes(
        orjson.dumps({"messages": [{"role": "auditor", "content": "hi"}]})
    )
    # run_c numbers its trajectories anew each epoch: c_0 and c_1 are two trajectories each, so no link is sure.
    for epoch in range(2):
        write_epoch_file(release / "run_c", epoch, epoch_document(epoch, n=2, trajectory_ids=["c_0", "c_1"]))
    (release / "run_c" / "transcripts.jsonl").write_bytes(_jsonl([_audit("c_1", 1), _audit("c_0", 2)]))
    warehouse = root / "wh"
    assert main(["build", "--release", str(release), "--warehouse", str(warehouse), "--workers", "1"]) == 0
    return release, warehouse


@pytest.mark.slow
def test_trajectories_link_to_their_transcripts_and_the_rest_are_null(built, query):
    release, wh = built
    rows = query(
        wh,
        "select run_id, epoch, traj_index, transcript_path, line, n_turns, n_transcripts, id_source "
        "from trajectory_transcripts order by run_id, epoch, traj_index",
    )
    assert len(rows) == 3 * 6 + 2 + 2 * 2  # a row per trajectory
    linked = {(r[0], r[1], r[2]): r[3:] for r in rows if r[3] is not None}
    assert set(linked) == {("run_a", e, i) for e in (0, 1) for i in range(6)} | {("run_b", 0, 1)}
    assert linked[("run_a", 1, 4)] == ("run_a/transcripts/epoch_001.jsonl", 5, 10, 1, "trajectory_id")
    # a_0_1 has two transcripts: the first by path is linked (epoch_000.jsonl sorts before extra.jsonl).
    assert linked[("run_a", 0, 1)] == ("run_a/transcripts/epoch_000.jsonl", 2, 4, 2, "trajectory_id")
    assert linked[("run_b", 0, 1)] == ("run_b/epoch_000/transcripts/b_1.json", None, 1, 1, "file name")


@pytest.mark.slow
def test_transcript_metrics_per_epoch_and_by_reward_third(built, query):
    _, wh = built
    rows = query(
        wh,
        "select epoch, n_transcripts, mean_turns, mean_tool_calls, top_n, top_mean_reward, top_mean_turns, "
        "bottom_n, bottom_mean_reward, bottom_mean_turns from transcript_metrics where run_id = 'run_a' order by epoch",
    )
    # Turns are 2 (1 + position): 2, 4, ..., 12, a mean of 7; tool calls 1 + position, a mean of 3.5.
    # Epoch 0 by reward, ties by position: 1 (0.9), 5 (0.7), 2 (0.5), 3 (0.5), 4 (0.3), 0 (0.1).
    # Top third: positions 1 and 5 (turns 4 and 12); bottom third: 4 and 0 (turns 10 and 2).
    assert rows[0] == pytest.approx((0, 6, 7.0, 3.5, 2, 0.8, 8.0, 2, 0.2, 6.0))
    # Epoch 1, rewards rising with position: top third 5 and 4 (12, 10), bottom third 1 and 0 (4, 2).
    assert rows[1] == pytest.approx((1, 6, 7.0, 3.5, 2, 0.9, 11.0, 2, 0.1, 3.0))
    assert len(rows) == 2  # epoch 2 has no transcript, so no row


@pytest.mark.slow
def test_unmatched_and_duplicate_records_are_warnings_naming_the_file(built, query):
    _, wh = built
    rows = query(
        wh,
        "select source_path, error_kind, severity, message from ingest_errors "
        "where error_kind like '%transcript%' order by error_kind",
    )
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("run_a/transcripts/extra.jsonl", "duplicate_transcript", "warning"),
        ("run_c/transcripts.jsonl", "transcript_ambiguous", "warning"),
        ("run_a/transcripts/extra.jsonl", "transcript_unmatched", "warning"),
    ]
    assert rows[0][3] == (
        "1 record(s) of trajectories that already have a transcript, the first a_0_1 at line 2, whose transcript "
        "is run_a/transcripts/epoch_000.jsonl line 2"
    )
    assert rows[1][3] == (
        "2 record(s) whose trajectory id several trajectories of run run_c carry, the first c_1 at line 1 "
        "(carried by 2)"
    )
    assert rows[2][3] == "1 record(s) whose trajectory id is no trajectory of run run_a, the first nobody at line 1"
    assert query(wh, "select count(*) from fact_epochs") == [(6,)]  # every epoch loaded


@pytest.mark.slow
def test_show_prints_the_transcript_headed_by_its_trajectory(built, capsys):
    release, wh = built
    assert main(["show", "a_1_0", "--warehouse", str(wh), "--width", "60"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[:5] == [
        "trajectory a_1_0",
        "run run_a · epoch 1 · group 0 (position 0)",
        "reward 0 · advantage 0",
        "model (the snapshot after this epoch): claude-haiku-4-5-20251001-ft_snap_001",
        "transcript: run_a/transcripts/epoch_001.jsonl, line 1 (jsonl)",
    ]
    assert "  metadata.judge.score: 1" in lines
    # The terminal's escape sequence is shown, not sent: the content is data.
    assert "\x1b" not in out and "  plain \\x1b[31mred\\x1b[0m text, as written" in lines
    assert "  → tool call send_message" in lines and "── target ──" in lines

    assert main(["show", "a_1_0", "--warehouse", str(wh), "--format", "json"]) == 0
    record = (release / "run_a" / "transcripts" / "epoch_001.jsonl").read_bytes().splitlines()[0]
    assert capsys.readouterr().out.encode() == record + b"\n"  # the record as its file holds it


@pytest.mark.slow
def test_show_refuses_on_one_line(built, capsys):
    _, wh = built
    assert main(["show", "ft_missing", "--warehouse", str(wh)]) == 2
    err = capsys.readouterr().err
    assert err == "grpo-warehouse show: no trajectory ft_missing in the warehouse\n"
    assert main(["show", "", "--run", "", "--warehouse", str(wh)]) == 2  # empty ids, quoted so the line reads
    assert capsys.readouterr().err == 'grpo-warehouse show: no trajectory "" in run "" in the warehouse\n'
    assert main(["show", "a_2_0", "--warehouse", str(wh), "--format", "json"]) == 2  # a trajectory without one
    assert capsys.readouterr().err.count("\n") == 1
    assert main(["show", "a_2_0", "--warehouse", str(wh)]) == 0
    assert "no transcript of this trajectory was found" in capsys.readouterr().out
    assert main(["show", "x", "--warehouse", str(wh / "nowhere")]) == 2


@pytest.mark.slow
def test_the_sample_transcripts_are_linked_and_the_binary_runs_turn_short_late(sample_warehouse, query):
    _, wh = sample_warehouse
    linked = dict(query(wh, "select run_id, count(transcript_path) from trajectory_transcripts group by 1"))
    # Every 20th epoch and the last, 64 trajectories each: 0, 20, ..., 480 and 490; 0, 20, ..., 480.
    assert linked["binary_v1_grpo_binary_v1_bs64"] == 64 * 26
    assert linked["mt3_2f_grpo_mt_v3_2fp"] == 64 * 25
    assert query(wh, "select count(*) from ingest_errors where error_kind like '%transcript%'") == [(0,)]
    early, late = query(
        wh,
        "select avg(mean_tool_calls) from transcript_metrics where run_id = 'binary_v1_grpo_binary_v1_bs64' "
        "group by epoch >= 420 order by epoch >= 420",
    )
    assert late[0] < 0.6 * early[0]


@pytest.mark.slow
def test_the_summary_counts_linked_trajectories_and_names_the_show_command(built, capsys):
    _, wh = built
    print_summary(wh, 1.0)
    out = capsys.readouterr().out
    # 12 of run_a (epochs 0 and 1) and b_1; the highest reward with a transcript is a_1_5's 1.0.
    assert "24 trajectories (13 with a transcript)" in out
    assert out.splitlines()[-1] == "  read the transcript behind the highest reward: grpo-warehouse show a_1_5"


def test_the_show_example_skips_non_finite_rewards_and_names_the_run_of_a_shared_id():
    with duckdb.connect() as con:
        con.execute(
            "create table fact_trajectories as select * from (values ('r 1', 0, 0, 'nan'::double), "
            "('r 1', 0, 1, 0.5), ('r 1', 1, 0, 0.5), ('r;2', 0, 0, 0.9), ('r;2', 1, 0, 0.5)) "
            "as t(run_id, epoch, traj_index, reward)"
        )
        con.execute(
            "create table trajectory_transcripts as select * from (values ('r 1', 0, 0, 'a', 'x.jsonl'), "
            "('r 1', 0, 1, 'b', 'x.jsonl'), ('r 1', 1, 0, 'c d', 'x.jsonl'), ('r;2', 0, 0, 'e', null), "
            "('r;2', 1, 0, 'c d', null)) as t(run_id, epoch, traj_index, trajectory_id, transcript_path)"
        )
        # r;2's 0.9 has no transcript; of the 0.5s the latest epoch's, whose id r;2 has too.
        assert _show_example(con) == "grpo-warehouse show 'c d' --run 'r 1'"
        con.execute("update trajectory_transcripts set transcript_path = null")
        assert _show_example(con) is None
