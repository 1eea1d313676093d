-- One row per unordered pair of runs in an ablation (run_a < run_b): delta = matched_reward(run_b) −
-- matched_reward(run_a), a percentile bootstrap interval for it at getvariable('ci_level') and prob_improvement,
-- the share of (epoch of run_b, epoch of run_a) pairs of the two matched windows where run_b's mean reward is
-- higher, ties counting one half (the Mann–Whitney count).
-- What is resampled: the per-epoch mean rewards of each run's matched window (the epochs matched_reward averages),
-- with replacement, independently per run, getvariable('bootstrap_reps') times; each replicate's delta is the
-- difference of the two resampled means. Epochs are the unit because they are what matched_reward averages. The
-- draws come from md5(seed, run, replicate, position), not random(), so a rebuild gives the same numbers at any
-- thread count; matched_window_values holds each run's window and bootstrap_means its resampled means.
-- Caveat: per-epoch rewards are autocorrelated (the policy changes slowly), and an iid bootstrap treats them as
-- independent, so the interval is too narrow and prob_improvement is descriptive, not a p-value.
with summaries as (
    select
        run_id,
        ablation,
        matched_horizon,
        matched_reward
    from run_summary
),

window_values as (
    select
        run_id,
        position,
        mean_reward
    from matched_window_values
),

resampled_means as (
    select
        run_id,
        replicate,
        resampled_mean
    from bootstrap_means
),

pairs as (
    select
        run_a.ablation,
        run_a.run_id as run_a,
        run_b.run_id as run_b,
        run_a.matched_horizon,
        run_b.matched_reward - run_a.matched_reward as delta,
        run_a.matched_reward as matched_reward_a,
        run_b.matched_reward as matched_reward_b
    from summaries as run_a
    inner join summaries as run_b
        on run_b.ablation = run_a.ablation and run_b.run_id > run_a.run_id
),

bootstrap as (
    select
        pairs.run_a,
        pairs.run_b,
        quantile_cont(mean_b.resampled_mean - mean_a.resampled_mean, (1 - getvariable('ci_level')) / 2) as ci_low,
        quantile_cont(mean_b.resampled_mean - mean_a.resampled_mean, (1 + getvariable('ci_level')) / 2) as ci_high
    from pairs
    inner join resampled_means as mean_a on mean_a.run_id = pairs.run_a
    inner join resampled_means as mean_b on mean_b.run_id = pairs.run_b and mean_b.replicate = mean_a.replicate
    group by pairs.run_a, pairs.run_b
),

improvements as (
    select
        pairs.run_a,
        pairs.run_b,
        avg(case
            when value_b.mean_reward > value_a.mean_reward then 1.0
            when value_b.mean_reward = value_a.mean_reward then 0.5
            else 0.0
        end) as prob_improvement,
        count(distinct value_a.position) as n_window_epochs_a,
        count(distinct value_b.position) as n_window_epochs_b
    from pairs
    inner join window_values as value_a on value_a.run_id = pairs.run_a
    inner join window_values as value_b on value_b.run_id = pairs.run_b
    group by pairs.run_a, pairs.run_b
),

final as (
    select
        pairs.ablation,
        pairs.run_a,
        pairs.run_b,
        pairs.delta,
        bootstrap.ci_low,
        bootstrap.ci_high,
        improvements.prob_improvement,
        pairs.matched_horizon,
        pairs.matched_reward_a,
        pairs.matched_reward_b,
        improvements.n_window_epochs_a,
        improvements.n_window_epochs_b,
        getvariable('bootstrap_reps') as bootstrap_reps
    from pairs
    left join bootstrap using (run_a, run_b)
    left join improvements using (run_a, run_b)
)

select * from final
order by ablation, run_a, run_b
