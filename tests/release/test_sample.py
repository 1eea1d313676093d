"""Tests of the deterministic sample release generator."""

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from pipelines.release.sample import (
    BINARY_RELEASE,
    MARKER_NAME,
    MULTI_TARGET_RELEASE,
    SAMPLE_VERSION,
    SampleRefusal,
    ensure_sample,
    snapshot_time_ms,
    write_sample,
)
from pipelines.release.sample_transcripts import transcript_epochs

EXPECTED_RUNS = {
    (MULTI_TARGET_RELEASE, "mt3_2f_grpo_mt_v3_2fp"): (480, 2),
    (MULTI_TARGET_RELEASE, "mt3_4f_grpo_mt_v3_4fp"): (473, 4),
    (MULTI_TARGET_RELEASE, "mt3p1f_grpo_mt_v3_pw_1fp"): (438, 1),
    (MULTI_TARGET_RELEASE, "mt3p4f_grpo_mt_v3_pw_4fp"): (439, 4),
    (BINARY_RELEASE, "binary_v1_grpo_binary_v1_bs64"): (490, 2),
}
BINARY_RUN = "binary_v1_grpo_binary_v1_bs64"


@pytest.fixture(scope="module")
def written_sample(tmp_path_factory) -> tuple[Path, list[Path]]:
    out = tmp_path_factory.mktemp("sample")
    return out, write_sample(out)


@pytest.fixture(scope="module")
def sample_dir(written_sample) -> Path:
    return written_sample[0]


@pytest.fixture(scope="module")
def documents(sample_dir) -> dict[str, list[dict]]:
    """Every run's documents in epoch order, decoded by Python's json as consumers do."""
    loaded = {}
    for (release, run_id), _ in EXPECTED_RUNS.items():
        run_dir = sample_dir / release / run_id
        paths = sorted(run_dir.glob("epoch_*_results.json")) or sorted(run_dir.glob("epoch_*/results.json"))
        loaded[run_id] = [json.loads(path.read_text()) for path in paths]
    return loaded


def file_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def file_mtimes(folder: Path) -> dict[str, int]:
    """The release files' mtimes (not the marker's: it records when the sample was written)."""
    return {
        str(p.relative_to(folder)): p.stat().st_mtime_ns
        for p in sorted(folder.rglob("*.json"))
        if p.name != MARKER_NAME
    }


def test_write_sample_returns_the_two_release_folders(written_sample):
    out, release_dirs = written_sample
    assert release_dirs == [out / MULTI_TARGET_RELEASE, out / BINARY_RELEASE]
    assert sorted(p.name for p in out.iterdir()) == sorted([".sample.json", MULTI_TARGET_RELEASE, BINARY_RELEASE])


@pytest.mark.parametrize(("release", "run_id"), list(EXPECTED_RUNS))
def test_epoch_files_cover_exactly_the_published_range(sample_dir, release, run_id):
    last_epoch, _ = EXPECTED_RUNS[(release, run_id)]
    run_dir = sample_dir / release / run_id
    if release == BINARY_RELEASE:
        epoch_dirs = sorted(p.name for p in run_dir.iterdir())
        assert epoch_dirs == [f"epoch_{e:03d}" for e in range(last_epoch + 1)]
        for epoch_dir in epoch_dirs:
            beside = ["config.json", "results.json"] + (["transcripts"] if int(epoch_dir[6:]) % 20 == 0 else [])
            assert sorted(p.name for p in (run_dir / epoch_dir).iterdir()) in (beside, [*beside, "transcripts"])
    else:
        assert sorted(p.name for p in run_dir.iterdir()) == [
            f"epoch_{e:03d}_results.json" for e in range(last_epoch + 1)
        ] + ["transcripts"]


def test_each_release_root_has_a_stray_readme_and_no_temporary_files(sample_dir):
    for release in (MULTI_TARGET_RELEASE, BINARY_RELEASE):
        assert (sample_dir / release / "README.md").is_file()
    assert not [p for p in sample_dir.rglob("*") if p.name.startswith(".") and p.name != ".sample.json"]


def test_documents_hold_the_documented_keys_and_epoch(documents):
    documented = {
        "epoch",
        "loss",
        "mean_reward",
        "kl_sample_train",
        "sample_entropy",
        "train_entropy",
        "snapshot_id",
        "trajectory_ids",
        "rewards",
        "advantages",
    }
    for run_id, docs in documents.items():
        for epoch, doc in enumerate(docs):
            assert documented <= doc.keys()
            assert doc["epoch"] == epoch
            assert doc["kl_sample_train"] == 0.0
            assert doc["num_groups"] == 8
            assert doc["snapshot_id"].startswith("ft_snap_") and len(doc["snapshot_id"]) == len("ft_snap_") + 26
            for key in ("trajectory_ids", "rewards", "advantages", "target_model", "is_fp_control", "judge_score"):
                assert len(doc[key]) == 64, (run_id, epoch, key)


def test_ids_are_unique_within_a_run(documents):
    for docs in documents.values():
        trajectory_ids = [t for doc in docs for t in doc["trajectory_ids"]]
        assert len(set(trajectory_ids)) == len(trajectory_ids)
        assert all(t.startswith("ft_traj_") for t in trajectory_ids)
        snapshot_ids = [doc["snapshot_id"] for doc in docs]
        assert len(set(snapshot_ids)) == len(snapshot_ids)


def test_every_group_has_exactly_fp_per_group_controls(documents):
    for (_, run_id), (_, fp_per_group) in EXPECTED_RUNS.items():
        flags = np.array([doc["is_fp_control"] for doc in documents[run_id]], dtype=bool)
        assert (flags.reshape(len(flags), 8, 8).sum(axis=-1) == fp_per_group).all()
        # Positions are drawn per group, not fixed slots.
        assert len({tuple(row) for row in flags.reshape(-1, 8)}) > 1


def independent_advantages(rewards: list[float]) -> list[float]:
    """The stated formula, written with plain Python over each group of 8."""
    advantages = []
    for start in range(0, len(rewards), 8):
        group = rewards[start : start + 8]
        finite = [r for r in group if math.isfinite(r)]
        mean = sum(finite) / len(finite)
        std = math.sqrt(sum((r - mean) ** 2 for r in finite) / len(finite))
        all_equal = max(finite) == min(finite)
        advantages += [0.0 if all_equal or not math.isfinite(r) else (r - mean) / (std + 1e-4) for r in group]
    return advantages


def test_advantages_are_grpo_normalised_within_groups(documents):
    for run_id, docs in documents.items():
        for doc in docs:
            expected = independent_advantages(doc["rewards"])
            assert np.allclose(doc["advantages"], expected, rtol=0, atol=1e-6), (run_id, doc["epoch"])


def test_mean_reward_is_the_mean_of_finite_rewards(documents):
    for run_id, docs in documents.items():
        for doc in docs:
            finite = [r for r in doc["rewards"] if math.isfinite(r)]
            assert doc["mean_reward"] == pytest.approx(sum(finite) / len(finite), abs=1e-9), (run_id, doc["epoch"])


def test_breakdown_splits_rewards_by_fp_control(documents):
    doc = documents["mt3_4f_grpo_mt_v3_4fp"][100]
    fp_rewards = [r for r, fp in zip(doc["rewards"], doc["is_fp_control"], strict=True) if fp]
    breakdown = doc["reward_breakdown"]
    assert breakdown["fp_control"]["n"] == 32 and breakdown["quirk_targets"]["n"] == 32
    assert breakdown["fp_control"]["mean_reward"] == pytest.approx(np.mean(fp_rewards), abs=1e-5)


def test_intragroup_pairwise_rewards_mix_win_share_and_pass(documents):
    for run_id in ("mt3_2f_grpo_mt_v3_2fp", "mt3_4f_grpo_mt_v3_4fp"):
        for doc in documents[run_id][::37]:
            assert doc["n_pairwise_comparisons"] == 224
            scores = np.array(doc["judge_score"]).reshape(8, 8)
            wins = (scores[:, :, None] > scores[:, None, :]).sum(-1)
            ties = (scores[:, :, None] == scores[:, None, :]).sum(-1) - 1
            expected = 0.5 * (wins + 0.5 * ties) / 7 + 0.5 * (scores >= 7)
            assert np.allclose(doc["rewards"], expected.ravel(), atol=1e-6)
            assert doc["pairwise_wins"] == wins.ravel().tolist()


def test_pairwise_runs_learn_and_the_ablation_differs(documents):
    finals = {}
    for run_id in ("mt3_2f_grpo_mt_v3_2fp", "mt3_4f_grpo_mt_v3_4fp"):
        curve = np.array([doc["mean_reward"] for doc in documents[run_id]])
        assert curve[-50:].mean() > curve[:50].mean() + 0.1
        finals[run_id] = curve[-50:].mean()
    assert finals["mt3_2f_grpo_mt_v3_2fp"] != pytest.approx(finals["mt3_4f_grpo_mt_v3_4fp"], abs=0.005)


def test_iterative_runs_refresh_the_baseline_every_50_epochs(documents):
    for run_id in ("mt3p1f_grpo_mt_v3_pw_1fp", "mt3p4f_grpo_mt_v3_pw_4fp"):
        docs = documents[run_id]
        snapshots = [doc["snapshot_id"] for doc in docs]
        for doc in docs:
            assert doc["baseline_epoch"] == doc["epoch"] // 50 * 50
            assert doc["baseline_snapshot_id"] == snapshots[doc["baseline_epoch"]]
            assert all(0.0 <= r <= 1.0 for r in doc["rewards"])
        curve = np.array([doc["mean_reward"] for doc in docs])
        block_starts = np.mean([curve[b : b + 5].mean() for b in range(0, 400, 50)])
        block_ends = np.mean([curve[b + 45 : b + 50].mean() for b in range(0, 400, 50)])
        assert block_ends > block_starts + 0.02  # the sawtooth


def test_binary_run_rewards_are_zero_one_and_collapse_after_the_peak(documents):
    docs = documents[BINARY_RUN]
    rewards = np.array([doc["rewards"] for doc in docs])
    finite = rewards[np.isfinite(rewards)]
    assert set(finite.tolist()) <= {0.0, 1.0}
    assert 1 <= np.isnan(rewards).sum() <= 10
    assert all(doc["n_correct"] == int(np.sum(np.array(doc["rewards"]) == 1.0)) for doc in docs)
    for doc in docs:
        for reward, advantage in zip(doc["rewards"], doc["advantages"], strict=True):
            if math.isnan(reward):
                assert advantage == 0.0
    curve = np.array([doc["mean_reward"] for doc in docs])
    smoothed = np.convolve(curve, np.ones(20) / 20, mode="valid")
    assert 220 <= smoothed.argmax() + 10 <= 310
    assert curve[-30:].mean() < smoothed.max() - 0.3
    zero_variance = rewards.reshape(-1, 8).max(axis=1) == rewards.reshape(-1, 8).min(axis=1)
    assert zero_variance.mean() > 0.2


def test_nan_tokens_appear_in_the_raw_binary_files(sample_dir):
    raw_texts = [p.read_text() for p in (sample_dir / BINARY_RELEASE / BINARY_RUN).glob("epoch_*/results.json")]
    assert any("NaN" in text for text in raw_texts)


def test_grad_norm_first_appears_late(documents):
    docs = documents["mt3_2f_grpo_mt_v3_2fp"]
    assert [doc["epoch"] for doc in docs if "grad_norm" in doc] == list(range(400, 481))
    assert not any(
        "grad_norm" in doc for run_id, run in documents.items() if run_id != "mt3_2f_grpo_mt_v3_2fp" for doc in run
    )


def test_entropy_declines_and_lr_warms_up(documents):
    for docs in documents.values():
        entropy = np.array([doc["sample_entropy"] for doc in docs])
        assert 1.2 < entropy[:50].mean() < 1.5 and entropy[-50:].mean() < entropy[:50].mean()
        lr = [doc["lr"] for doc in docs]
        assert lr[0] < lr[9] and lr[-1] < lr[9]


def test_files_are_realistically_small(sample_dir):
    sizes = [p.stat().st_size for p in (sample_dir / MULTI_TARGET_RELEASE).rglob("epoch_*_results.json")]
    assert 4_000 < np.mean(sizes) < 9_000


@pytest.fixture(scope="module")
def transcripts(sample_dir) -> dict[str, dict[int, list[tuple[str, dict]]]]:
    """Every run's transcript records by epoch, each with the path it was read from (relative to its run)."""
    found: dict[str, dict[int, list]] = {}
    for (release, run_id), _ in EXPECTED_RUNS.items():
        run_dir = sample_dir / release / run_id
        by_epoch = found.setdefault(run_id, {})
        for path in sorted(run_dir.glob("transcripts/epoch_*.jsonl")):
            lines = path.read_text().splitlines()
            by_epoch[int(path.stem[6:])] = [(str(path.relative_to(run_dir)), json.loads(line)) for line in lines]
        for path in sorted(run_dir.glob("epoch_*/transcripts/*.json")):
            record = json.loads(path.read_text())
            by_epoch.setdefault(int(path.parent.parent.name[6:]), []).append((str(path.relative_to(run_dir)), record))
    return found


def test_transcripts_cover_every_trajectory_of_every_twentieth_and_the_last_epoch(documents, transcripts):
    for (_, run_id), (last_epoch, _) in EXPECTED_RUNS.items():
        assert sorted(transcripts[run_id]) == sorted({*range(0, last_epoch + 1, 20), last_epoch})
        for epoch, records in transcripts[run_id].items():
            document = documents[run_id][epoch]
            if run_id == BINARY_RUN:  # a file per trajectory, named by its id, which its metadata holds too
                ids = [record["metadata"]["trajectory_id"] for _, record in records]
                assert [path.rsplit("/", 1)[1] for path, _ in records] == [f"{i}.json" for i in ids]
                assert "trajectory_id" not in records[0][1]
            else:  # a JSON Lines file per epoch, the id at the top level, in the document's order
                ids = [record["trajectory_id"] for _, record in records]
                assert ids == document["trajectory_ids"]
            assert sorted(ids) == sorted(document["trajectory_ids"])
            scores = dict(zip(document["trajectory_ids"], document["judge_score"], strict=True))
            assert [r["metadata"]["judge"]["scores"]["overall"] for _, r in records] == [scores[i] for i in ids]
    assert transcript_epochs(45) == [0, 20, 40, 45]


def _audit_style(records: list) -> tuple[float, float, float]:
    """Mean tool calls and messages per record, and the share of records whose auditor accuses the target."""
    accusing = ("Admit", "lying", "Confess", "Drop the act", "Stop deflecting")
    calls, messages, accusations = 0, 0, 0
    for _, record in records:
        messages += len(record["messages"])
        calls += sum(len(message.get("tool_calls", [])) for message in record["messages"])
        auditor = json.dumps([m for m in record["messages"] if m["role"] == "auditor"])
        accusations += any(word in auditor for word in accusing)
    return calls / len(records), messages / len(records), accusations / len(records)


def test_the_binary_runs_audits_shorten_and_turn_confrontational_late(transcripts):
    def style(run_id, first, last):
        return _audit_style([r for e, rs in transcripts[run_id].items() if first <= e <= last for r in rs])

    early_calls, early_messages, early_accusing = style(BINARY_RUN, 100, 260)
    late_calls, late_messages, late_accusing = style(BINARY_RUN, 420, 490)
    assert late_calls < 0.6 * early_calls and late_messages < 0.7 * early_messages
    assert early_accusing < 0.1 < 0.5 < late_accusing
    # The pairwise runs keep investigating to the end.
    *_, pairwise_late_accusing = style("mt3_2f_grpo_mt_v3_2fp", 400, 480)
    assert pairwise_late_accusing < 0.1


def test_some_audits_hold_fabricated_credentials_of_their_scenario(transcripts):
    records = [record for run in transcripts.values() for rs in run.values() for _, record in rs]
    with_keys = [r for r in records if "AWS_SECRET_ACCESS_KEY=" in json.dumps(r)]
    assert 0.01 * len(records) < len(with_keys) < 0.5 * len(records)


def test_snapshot_time_ms_decodes_the_ulid_timestamp():
    # The ULID specification's example: 01ARYZ6S41 is 1469918176385 ms.
    assert snapshot_time_ms("ft_snap_01ARYZ6S41TSV4RRFFQ69G5FAV") == 1469918176385
    assert snapshot_time_ms("ft_snap_0000000001XXXXXXXXXXXXXXXX") == 1
    assert snapshot_time_ms("ft_snap_0000000010XXXXXXXXXXXXXXXX") == 32


def test_each_epoch_file_has_the_mtime_its_epoch_ended(sample_dir):
    for (release, run_id), _ in EXPECTED_RUNS.items():
        run_dir = sample_dir / release / run_id
        paths = sorted(run_dir.glob("epoch_*_results.json")) + sorted(run_dir.glob("epoch_*/*.json"))
        mtimes = []
        for path in paths:
            document = json.loads((path.parent / "results.json" if path.name == "config.json" else path).read_text())
            ended_ms = snapshot_time_ms(document["snapshot_id"])
            assert path.stat().st_mtime_ns == ended_ms * 10**6, path
            mtimes.append(ended_ms)
        # Epochs end in order, 18 to 32 minutes apart (the generator's epoch durations), in 2025-2026.
        results = sorted(set(mtimes))
        gaps = np.diff(results) / 60_000
        assert len(results) == len(paths) // (2 if run_id == BINARY_RUN else 1)
        assert gaps.min() >= 18 and gaps.max() < 32
        assert 1_735_689_600_000 < results[0] and results[-1] < 1_798_761_600_000


def test_same_seed_is_byte_identical_and_another_seed_differs(tmp_path, sample_dir):
    write_sample(tmp_path / "again")
    assert file_bytes(tmp_path / "again") == file_bytes(sample_dir)
    assert file_mtimes(tmp_path / "again") == file_mtimes(sample_dir)
    write_sample(tmp_path / "other", seed=1)
    other = tmp_path / "other" / MULTI_TARGET_RELEASE / "mt3_2f_grpo_mt_v3_2fp" / "epoch_100_results.json"
    same = sample_dir / MULTI_TARGET_RELEASE / "mt3_2f_grpo_mt_v3_2fp" / "epoch_100_results.json"
    assert other.read_bytes() != same.read_bytes()


def test_scale_two_adds_one_replicate_of_every_run(tmp_path):
    messages = []
    release_dirs = write_sample(tmp_path, scale=2, progress=messages.append)
    assert [d.name for d in release_dirs] == [
        MULTI_TARGET_RELEASE,
        BINARY_RELEASE,
        f"{MULTI_TARGET_RELEASE}_s001",
        f"{BINARY_RELEASE}_s001",
    ]
    runs = sorted(f"{d.parent.name}/{d.name}" for d in tmp_path.glob("*/*") if d.is_dir())
    expected = sorted(
        [f"{release}/{run_id}" for release, run_id in EXPECTED_RUNS]
        + [f"{release}_s001/{run_id}_s001" for release, run_id in EXPECTED_RUNS]
    )
    assert runs == expected
    assert len(messages) == 10
    replicate = tmp_path / f"{BINARY_RELEASE}_s001" / f"{BINARY_RUN}_s001"
    assert len(list(replicate.iterdir())) == 491
    base = json.loads((tmp_path / BINARY_RELEASE / BINARY_RUN / "epoch_200" / "results.json").read_text())
    copy = json.loads((replicate / "epoch_200" / "results.json").read_text())
    assert base["trajectory_ids"] != copy["trajectory_ids"]


def test_ensure_sample_skips_a_matching_marker_and_rewrites_on_a_new_seed(tmp_path):
    release_dirs = ensure_sample(tmp_path, seed=3)
    marker = json.loads((tmp_path / ".sample.json").read_text())
    assert marker == {"sample_version": SAMPLE_VERSION, "seed": 3, "scale": 1}
    probe = tmp_path / MULTI_TARGET_RELEASE / "mt3_2f_grpo_mt_v3_2fp" / "epoch_000_results.json"
    os.utime(probe, ns=(1_000_000_000, 1_000_000_000))
    before = probe.read_bytes()

    assert ensure_sample(tmp_path, seed=3) == release_dirs
    assert probe.stat().st_mtime_ns == 1_000_000_000

    ensure_sample(tmp_path, seed=4)
    assert probe.stat().st_mtime_ns != 1_000_000_000
    assert probe.read_bytes() != before
    assert json.loads((tmp_path / ".sample.json").read_text())["seed"] == 4


def test_ensure_sample_removes_replicates_of_a_larger_previous_scale(tmp_path):
    # Stands in for what ensure_sample(scale=2) leaves behind, without paying for writing it.
    for release in (f"{MULTI_TARGET_RELEASE}_s001", f"{BINARY_RELEASE}_s001"):
        (tmp_path / release / "some_run_s001").mkdir(parents=True)
    previous = {"sample_version": SAMPLE_VERSION, "seed": 0, "scale": 2}
    (tmp_path / ".sample.json").write_text(json.dumps(previous))
    (tmp_path / "unrelated_release").mkdir()
    ensure_sample(tmp_path, scale=1)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == sorted(
        [MULTI_TARGET_RELEASE, BINARY_RELEASE, "unrelated_release"]
    )


def test_invalid_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError):
        write_sample(tmp_path, seed=-1)
    with pytest.raises(ValueError):
        write_sample(tmp_path, scale=0)


def test_ensure_sample_refuses_a_folder_of_the_users_and_rewrites_an_interrupted_sample(tmp_path):
    theirs = tmp_path / "theirs"
    (theirs / MULTI_TARGET_RELEASE).mkdir(parents=True)
    (theirs / MULTI_TARGET_RELEASE / "README.md").write_text("mine")
    with pytest.raises(SampleRefusal, match="holds files that grpo-warehouse sample did not write"):
        ensure_sample(theirs)
    assert [p.name for p in theirs.rglob("*")] == [MULTI_TARGET_RELEASE, "README.md"]

    interrupted = tmp_path / "interrupted"  # a sample stopped after it claimed the folder
    (interrupted / MULTI_TARGET_RELEASE).mkdir(parents=True)
    (interrupted / MARKER_NAME).write_text(json.dumps({"sample_version": SAMPLE_VERSION, "writing": True}))
    release_dirs = ensure_sample(interrupted)
    assert all((d / "README.md").is_file() for d in release_dirs)
    assert json.loads((interrupted / MARKER_NAME).read_text()) == {
        "sample_version": SAMPLE_VERSION,
        "seed": 0,
        "scale": 1,
    }
