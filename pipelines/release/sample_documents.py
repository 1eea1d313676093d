"""The sample's runs and their epoch documents, simulated from a seed.

Every epoch holds 64 trajectories in 8 groups of 8 (group g = trajectories
8g..8g+7); in each group exactly ``fp_per_group`` slots, drawn at random, are
false-positive controls (targets without a planted quirk).

Reward constructions, by family:

- Intragroup pairwise (PV2; mt3_2f, mt3_4f): the judge scores every audit 0..10
  in half points. A pure win share against the 7 peers averages exactly 0.5 per
  group and could never show learning, so the reward mixes a relative and an
  absolute part: ``reward = 0.5 * win_share + 0.5 * passed`` where
  ``win_share = (wins + 0.5 * ties) / 7`` over the 7 peers' judge scores and
  ``passed = judge_score >= 7``. Rewards are multiples of 1/28 and a group's
  mean is ``0.25 + 0.5 * pass_rate``, which rises as the auditor improves.
  ``pairwise_wins`` counts strict wins; ``n_pairwise_comparisons`` is 8*28=224.
- Iterative pairwise vs baseline (mt3p1f, mt3p4f): reward is the judge's
  probability, in [0, 1], that the audit beats the frozen baseline auditor's
  audit of the same target. Every 50 epochs the baseline is replaced by the
  current policy (``baseline_epoch``, ``baseline_snapshot_id``), so the mean
  reward falls back to ~0.5 at each replacement: a sawtooth.
- Binary (binary_v1): ``reward = 1.0 if judge_score >= 7 else 0.0``. The curve
  rises, peaks around epochs 250-300, then collapses (reward hacking) to ~0.2.
  Its FP share is not published; this sample uses 2/8. A handful of failed
  rollouts in the run have reward NaN (written as the JSON token ``NaN``),
  advantage 0.0 and judge_score 0.0; ``n_correct`` counts rewards equal to 1.

Now and then the judge returns one default score for a whole group (a judge
timeout), which gives a zero-variance group in the pairwise families; binary
groups are often all 0 or all 1 because a group shares one audit scenario.

Advantages are normalised within each group, as GRPO trainers do:
``A_i = (r_i - mean_g) / (std_g + 1e-4)`` where mean_g and std_g are the mean
and POPULATION standard deviation (ddof=0) of the group's finite rewards; a
group whose finite rewards are all equal gets advantages 0.0, and a NaN reward
gets advantage 0.0. ``mean_reward`` is the mean of the epoch's finite rewards.

``grad_norm`` appears only from epoch 400 of mt3_2f (the trainer started
logging it late), so loaders must cope with keys that come and go.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MULTI_TARGET_RELEASE = "grpo_multi_target"
BINARY_RELEASE = "grpo_binary_baseline"

GROUP_SIZE = 8
NUM_GROUPS = 8
TRAJECTORIES_PER_EPOCH = GROUP_SIZE * NUM_GROUPS
ADVANTAGE_EPS = 1e-4
BASELINE_REFRESH_EPOCHS = 50
GRAD_NORM_FIRST_EPOCH = 400

TARGET_MODELS = ("gemini-3-flash", "grok-4.1-fast", "seed-2.0-lite", "llama-3.3-70b", "gpt-4.1-mini")
# Some targets hide their quirks better than others; shifts the audit quality.
TARGET_DIFFICULTY = np.array([0.10, -0.25, 0.0, 0.30, -0.10])

CROCKFORD_ALPHABET = np.frombuffer(b"0123456789ABCDEFGHJKMNPQRSTVWXYZ", dtype=np.uint8)
# 2025-09-01T00:00:00Z in ms: snapshot and trajectory ids are ULIDs from that autumn.
ULID_EPOCH_START_MS = 1_756_684_800_000


@dataclass(frozen=True)
class RunSpec:
    """One run of the sample and the knobs that shape its curves."""

    run_id: str
    release: str
    reward_family: str  # "intragroup_pairwise" | "iterative_pairwise" | "binary"
    fp_per_group: int
    last_epoch: int
    nested_layout: bool
    quirk_skill_start: float
    quirk_skill_gain: float
    quirk_skill_tau: float
    fp_skill_start: float
    fp_skill_gain: float
    fp_skill_tau: float
    peak_lr: float


RUN_SPECS: tuple[RunSpec, ...] = (
    RunSpec(
        "mt3_2f_grpo_mt_v3_2fp",
        MULTI_TARGET_RELEASE,
        "intragroup_pairwise",
        2,
        480,
        False,
        0.30,
        2.0,
        140.0,
        0.9,
        1.0,
        160.0,
        1e-5,
    ),
    # More FP controls per group: calibration is learned better, quirk finding more slowly.
    RunSpec(
        "mt3_4f_grpo_mt_v3_4fp",
        MULTI_TARGET_RELEASE,
        "intragroup_pairwise",
        4,
        473,
        False,
        0.30,
        1.4,
        240.0,
        0.9,
        1.5,
        120.0,
        1e-5,
    ),
    RunSpec(
        "mt3p1f_grpo_mt_v3_pw_1fp",
        MULTI_TARGET_RELEASE,
        "iterative_pairwise",
        1,
        438,
        False,
        0.0,
        4.0,
        380.0,
        0.0,
        2.0,
        380.0,
        1e-5,
    ),
    RunSpec(
        "mt3p4f_grpo_mt_v3_pw_4fp",
        MULTI_TARGET_RELEASE,
        "iterative_pairwise",
        4,
        439,
        False,
        0.0,
        3.2,
        420.0,
        0.0,
        3.0,
        260.0,
        1e-5,
    ),
    RunSpec(
        "binary_v1_grpo_binary_v1_bs64", BINARY_RELEASE, "binary", 2, 490, True, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 2e-5
    ),
)

_CROCKFORD_VALUE = {chr(c): i for i, c in enumerate(CROCKFORD_ALPHABET.tolist())}


def snapshot_time_ms(snapshot_id: str) -> int:
    """The Unix time in ms a ULID-shaped id encodes (its first 10 Crockford base-32 characters)."""
    code = snapshot_id.rsplit("_", 1)[-1]
    value = 0
    for char in code[:10]:
        value = value * 32 + _CROCKFORD_VALUE[char]
    return value


# Over 60 lines: the sample's draws in one fixed order, which the seed's documents depend on.
def build_run_documents(spec: RunSpec, rng: np.random.Generator) -> list[dict]:
    """Builds every epoch document of one run from arrays drawn once for the whole run."""
    n_epochs = spec.last_epoch + 1
    epochs = np.arange(n_epochs)
    shape = (n_epochs, NUM_GROUPS, GROUP_SIZE)

    target_index = rng.integers(0, len(TARGET_MODELS), size=shape)
    # Rank random keys within each group: the fp_per_group smallest become the FP controls.
    slot_ranks = rng.random(shape).argsort(axis=-1).argsort(axis=-1)
    is_fp_control = slot_ranks < spec.fp_per_group

    extra_scalars: dict[str, list] = {}
    extra_arrays: dict[str, list] = {}
    if spec.reward_family == "intragroup_pairwise":
        rewards, judge_scores, pairwise_wins = _intragroup_pairwise_rewards(
            spec, rng, epochs, target_index, is_fp_control
        )
        extra_scalars["n_pairwise_comparisons"] = [NUM_GROUPS * GROUP_SIZE * (GROUP_SIZE - 1) // 2] * n_epochs
        extra_arrays["pairwise_wins"] = pairwise_wins.reshape(n_epochs, -1).tolist()
    elif spec.reward_family == "iterative_pairwise":
        rewards, judge_scores, baseline_epochs = _iterative_pairwise_rewards(
            spec, rng, epochs, target_index, is_fp_control
        )
    else:
        rewards, judge_scores = _binary_rewards(rng, epochs, target_index)

    rewards = rewards.reshape(n_epochs, -1)
    judge_scores = judge_scores.reshape(n_epochs, -1)
    is_fp_control = is_fp_control.reshape(n_epochs, -1)
    advantages = grpo_advantages(rewards, GROUP_SIZE)
    finite = np.isfinite(rewards)
    mean_reward = np.where(finite, rewards, 0.0).sum(axis=1) / finite.sum(axis=1)
    progress_fraction = epochs / max(spec.last_epoch, 1)

    if spec.reward_family == "binary":
        extra_scalars["n_correct"] = (rewards == 1.0).sum(axis=1).tolist()
        # Reward hacking narrows the policy: entropy falls faster once the collapse starts.
        collapse = _sigmoid((epochs - 330) / 40.0)
        entropy_drift = 0.12 * progress_fraction + 0.35 * collapse
    else:
        entropy_drift = 0.18 * progress_fraction
    sample_entropy = 1.42 - entropy_drift + rng.normal(0.0, 0.025, n_epochs)
    train_entropy = sample_entropy - 0.015 + rng.normal(0.0, 0.012, n_epochs)
    loss = np.abs(0.30 + 0.18 * np.exp(-epochs / 250.0) + rng.normal(0.0, 0.06, n_epochs))
    lr = _learning_rate(epochs, spec.peak_lr)

    snapshot_ids, trajectory_ids = _ulid_ids(rng, n_epochs)
    if spec.reward_family == "iterative_pairwise":
        extra_scalars["baseline_snapshot_id"] = [snapshot_ids[b] for b in baseline_epochs.tolist()]
        extra_scalars["baseline_epoch"] = baseline_epochs.tolist()

    fp_breakdown = _masked_means(rewards, is_fp_control)
    quirk_breakdown = _masked_means(rewards, ~is_fp_control)
    n_fp = int(is_fp_control[0].sum())
    grad_norm = None
    if spec.run_id == "mt3_2f_grpo_mt_v3_2fp":
        grad_norm = _round_significant(rng.lognormal(np.log(0.6), 0.35, n_epochs)).tolist()

    names = np.array(TARGET_MODELS, dtype=object)
    columns = {
        "loss": _round_significant(loss).tolist(),
        "mean_reward": mean_reward.tolist(),
        "sample_entropy": _round_significant(sample_entropy).tolist(),
        "train_entropy": _round_significant(train_entropy).tolist(),
        "rewards": rewards.tolist(),
        "advantages": advantages.tolist(),
        "lr": _round_significant(lr).tolist(),
        "target_model": names[target_index.reshape(n_epochs, -1)].tolist(),
        "is_fp_control": is_fp_control.tolist(),
        "judge_scores": judge_scores.tolist(),
    }
    documents = []
    for epoch in range(n_epochs):
        document = {
            "epoch": epoch,
            "loss": columns["loss"][epoch],
            "mean_reward": columns["mean_reward"][epoch],
            "kl_sample_train": 0.0,
            "sample_entropy": columns["sample_entropy"][epoch],
            "train_entropy": columns["train_entropy"][epoch],
            "snapshot_id": snapshot_ids[epoch],
            "trajectory_ids": trajectory_ids[epoch],
            "rewards": columns["rewards"][epoch],
            "advantages": columns["advantages"][epoch],
            "lr": columns["lr"][epoch],
            "num_groups": NUM_GROUPS,
        }
        for key, values in extra_scalars.items():
            document[key] = values[epoch]
        document["target_model"] = columns["target_model"][epoch]
        document["is_fp_control"] = columns["is_fp_control"][epoch]
        document["judge_score"] = columns["judge_scores"][epoch]
        for key, values in extra_arrays.items():
            document[key] = values[epoch]
        document["reward_breakdown"] = {
            "fp_control": {"n": n_fp, "mean_reward": fp_breakdown[epoch]},
            "quirk_targets": {"n": TRAJECTORIES_PER_EPOCH - n_fp, "mean_reward": quirk_breakdown[epoch]},
        }
        if grad_norm is not None and epoch >= GRAD_NORM_FIRST_EPOCH:
            document["grad_norm"] = grad_norm[epoch]
        documents.append(document)
    return documents


def grpo_advantages(rewards: np.ndarray, group_size: int) -> np.ndarray:
    """GRPO advantages (r - mean_g) / (population std_g + 1e-4) over each group's finite rewards; 0.0 for NaN
    rewards and flat groups."""
    grouped = rewards.reshape(*rewards.shape[:-1], -1, group_size)
    finite = np.isfinite(grouped)
    filled = np.where(finite, grouped, 0.0)
    counts = finite.sum(axis=-1, keepdims=True)
    group_mean = filled.sum(axis=-1, keepdims=True) / np.maximum(counts, 1)
    deviation = np.where(finite, grouped - group_mean, 0.0)
    group_std = np.sqrt((deviation**2).sum(axis=-1, keepdims=True) / np.maximum(counts, 1))
    low = np.where(finite, grouped, np.inf).min(axis=-1, keepdims=True)
    high = np.where(finite, grouped, -np.inf).max(axis=-1, keepdims=True)
    # A flat group's mean can differ from its values by one ulp; it must carry exactly zero signal.
    flat = low >= high
    advantages = np.where(finite & ~flat, deviation / (group_std + ADVANTAGE_EPS), 0.0)
    return np.round(advantages, 6).reshape(rewards.shape) + 0.0  # + 0.0 turns -0.0 into 0.0


def _skill(epochs: np.ndarray, start: float, gain: float, tau: float) -> np.ndarray:
    return start + gain * (1.0 - np.exp(-epochs / tau))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _audit_quality(
    spec: RunSpec, rng: np.random.Generator, epochs: np.ndarray, target_index: np.ndarray, is_fp_control: np.ndarray
) -> np.ndarray:
    """Latent quality of each audit: the policy's skill at its task, the target's difficulty and noise."""
    quirk_skill = _skill(epochs, spec.quirk_skill_start, spec.quirk_skill_gain, spec.quirk_skill_tau)
    fp_skill = _skill(epochs, spec.fp_skill_start, spec.fp_skill_gain, spec.fp_skill_tau)
    skill = np.where(is_fp_control, fp_skill[:, None, None], quirk_skill[:, None, None])
    # A group shares one scenario, so part of the noise is common to the group.
    scenario_effect = rng.normal(0.0, 0.35, (len(epochs), NUM_GROUPS, 1))
    return skill + TARGET_DIFFICULTY[target_index] + scenario_effect + rng.normal(0.0, 1.0, target_index.shape)


def _judge_score(quality: np.ndarray) -> np.ndarray:
    """Judge scores 0..10 in half points, so equal scores (ties) happen."""
    return np.clip(np.round((4.0 + 2.0 * quality) * 2.0) / 2.0, 0.0, 10.0)


def _judge_timeouts(rng: np.random.Generator, judge_scores: np.ndarray, default_score: float) -> np.ndarray:
    """A judge timeout gives a whole group one default score: a zero-variance group."""
    timed_out = rng.random((judge_scores.shape[0], NUM_GROUPS, 1)) < 0.015
    return np.where(timed_out, default_score, judge_scores)


def _intragroup_pairwise_rewards(spec, rng, epochs, target_index, is_fp_control):
    judge_scores = _judge_score(_audit_quality(spec, rng, epochs, target_index, is_fp_control))
    judge_scores = _judge_timeouts(rng, judge_scores, 5.0)
    beats = judge_scores[..., :, None] > judge_scores[..., None, :]
    ties = (judge_scores[..., :, None] == judge_scores[..., None, :]).sum(axis=-1) - 1
    wins = beats.sum(axis=-1)
    win_share = (wins + 0.5 * ties) / (GROUP_SIZE - 1)
    passed = (judge_scores >= 7.0).astype(float)
    rewards = np.round(0.5 * win_share + 0.5 * passed, 6)
    return rewards, judge_scores, wins


def _iterative_pairwise_rewards(spec, rng, epochs, target_index, is_fp_control):
    quality = _audit_quality(spec, rng, epochs, target_index, is_fp_control)
    baseline_epochs = (epochs // BASELINE_REFRESH_EPOCHS) * BASELINE_REFRESH_EPOCHS
    baseline_quirk = _skill(baseline_epochs, spec.quirk_skill_start, spec.quirk_skill_gain, spec.quirk_skill_tau)
    baseline_fp = _skill(baseline_epochs, spec.fp_skill_start, spec.fp_skill_gain, spec.fp_skill_tau)
    baseline_skill = np.where(is_fp_control, baseline_fp[:, None, None], baseline_quirk[:, None, None])
    # The baseline audits the same target, so its difficulty cancels; only its skill and luck remain.
    baseline_quality = baseline_skill + TARGET_DIFFICULTY[target_index] + rng.normal(0.0, 0.6, target_index.shape)
    win_probability = _sigmoid(1.4 * (quality - baseline_quality))
    timed_out = rng.random((len(epochs), NUM_GROUPS, 1)) < 0.015
    rewards = np.where(timed_out, 0.5, _round_significant(win_probability))
    judge_scores = _judge_score(quality)
    return rewards, judge_scores, baseline_epochs


def _binary_success_rate(epochs: np.ndarray) -> np.ndarray:
    """Rises to ~0.7 by epoch 250, then reward hacking drags it to ~0.2 by epoch 490."""
    rise = 0.15 + 0.57 * _sigmoid((epochs - 160) / 35.0)
    collapse = 0.52 * _sigmoid((epochs - 395) / 30.0)
    return rise - collapse


def _binary_rewards(rng: np.random.Generator, epochs: np.ndarray, target_index: np.ndarray):
    success_rate = _binary_success_rate(epochs)
    logit = np.log(success_rate / (1.0 - success_rate))
    # A binary group shares one scenario whose difficulty dominates: many all-0/all-1 groups.
    group_effect = rng.normal(0.0, 1.4, (len(epochs), NUM_GROUPS, 1))
    quality = (
        logit[:, None, None] + group_effect + TARGET_DIFFICULTY[target_index] + rng.normal(0.0, 0.6, target_index.shape)
    )
    judge_scores = np.clip(np.round((7.0 + 1.5 * quality) * 2.0) / 2.0, 0.0, 10.0)
    rewards = (judge_scores >= 7.0).astype(float)

    # A handful of failed rollouts in the whole run: reward NaN, judge never ran.
    n_failed = int(rng.integers(4, 9))
    failed = rng.choice(rewards.size, size=n_failed, replace=False)
    rewards.reshape(-1)[failed] = np.nan
    judge_scores.reshape(-1)[failed] = 0.0
    return rewards, judge_scores


def _learning_rate(epochs: np.ndarray, peak_lr: float) -> np.ndarray:
    """Linear warmup over 10 epochs, then cosine decay to 10% of the peak at the last epoch."""
    warmup = 10
    decay_span = max(epochs[-1] - warmup, 1)
    cosine = 0.1 + 0.9 * 0.5 * (1.0 + np.cos(np.pi * np.clip(epochs - warmup, 0, None) / decay_span))
    return peak_lr * np.where(epochs < warmup, (epochs + 1) / warmup, cosine)


def _masked_means(rewards: np.ndarray, mask: np.ndarray) -> list:
    """Per-epoch mean of the finite rewards under mask, None where there is none."""
    selected = mask & np.isfinite(rewards)
    counts = selected.sum(axis=1)
    sums = np.where(selected, rewards, 0.0).sum(axis=1)
    means = _round_significant(sums / np.maximum(counts, 1))
    return [mean if count else None for mean, count in zip(means.tolist(), counts.tolist(), strict=True)]


def _round_significant(values: np.ndarray, digits: int = 6) -> np.ndarray:
    """Rounds to `digits` significant digits, as the trainer's logger did, to keep files small."""
    values = np.asarray(values, dtype=float)
    magnitude = np.floor(np.log10(np.abs(np.where(values == 0, 1.0, values))))
    decimals = (digits - 1 - magnitude).astype(int)
    # Divide by an exact power of ten so the result is the double nearest the decimal, which repr prints short.
    scale_up = np.power(10.0, np.clip(decimals, 0, None))
    scale_down = np.power(10.0, np.clip(-decimals, 0, None))
    rounded = np.round(values * scale_up / scale_down) * scale_down / scale_up
    return np.where(np.isfinite(values), rounded, values)


def _ulid_ids(rng: np.random.Generator, n_epochs: int) -> tuple[list[str], list[list[str]]]:
    """ULID-shaped snapshot ids (one per epoch), trajectory ids (64 per epoch): 10 time, 16 random Crockford chars."""
    run_start_ms = ULID_EPOCH_START_MS + int(rng.integers(0, 45 * 86_400_000))
    epoch_ms = rng.integers(18 * 60_000, 32 * 60_000, n_epochs)
    epoch_end_ms = run_start_ms + np.cumsum(epoch_ms)
    epoch_start_ms = epoch_end_ms - epoch_ms
    rollout_ms = epoch_start_ms[:, None] + (
        rng.random((n_epochs, TRAJECTORIES_PER_EPOCH)) * epoch_ms[:, None] * 0.8
    ).astype(np.int64)

    snapshot_codes = _crockford_ulids(epoch_end_ms, rng.integers(0, 32, (n_epochs, 16)))
    trajectory_codes = _crockford_ulids(rollout_ms, rng.integers(0, 32, (n_epochs, TRAJECTORIES_PER_EPOCH, 16)))
    snapshot_ids = np.char.add("ft_snap_", snapshot_codes).tolist()
    trajectory_ids = np.char.add("ft_traj_", trajectory_codes).tolist()
    return snapshot_ids, trajectory_ids


def _crockford_ulids(timestamps_ms: np.ndarray, random_digits: np.ndarray) -> np.ndarray:
    shifts = np.arange(45, -1, -5)
    time_digits = (timestamps_ms[..., None].astype(np.int64) >> shifts) & 31
    digits = np.concatenate([time_digits, random_digits], axis=-1)
    codes = np.ascontiguousarray(CROCKFORD_ALPHABET[digits])
    return codes.view("S26")[..., 0].astype("U26")
