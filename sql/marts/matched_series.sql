-- One row per run: the series its intervals are computed from, its loaded epochs at or before its ablation's
-- compute-matched horizon in epoch order (run_summary fits a run's own interval to them, ablation_contrasts those of
-- two runs). mean_rewards holds each epoch's recomputed mean reward (null where none is finite); noise_variances each
-- epoch's sampling variance of that mean, the sample variance of its groups' mean rewards over their number (null
-- with fewer than two groups of a finite mean). Incremental on run_id: a run's row reads its own epochs and groups.
with epochs as (
    select
        run_id,
        epoch,
        mean_reward
    from epoch_metrics
),

groups as (
    select
        run_id,
        epoch,
        group_index,
        reward_mean
    from group_metrics
),

horizons as (
    select
        run_id,
        ablation,
        matched_horizon
    from run_horizons
),

-- `order by` fixes the summation order: a rebuild gives identical numbers at any thread count
noise as (
    select
        run_id,
        epoch,
        var_samp(reward_mean order by group_index) / count(*) as noise_variance
    from groups
    where isfinite(reward_mean)
    group by run_id, epoch
),

final as (
    select
        epochs.run_id,
        horizons.ablation,
        horizons.matched_horizon,
        list(epochs.epoch order by epochs.epoch) as epochs,
        list(epochs.mean_reward order by epochs.epoch) as mean_rewards,
        list(noise.noise_variance order by epochs.epoch) as noise_variances
    from epochs
    inner join horizons
        on epochs.run_id = horizons.run_id and epochs.epoch <= horizons.matched_horizon
    left join noise
        on epochs.run_id = noise.run_id and epochs.epoch = noise.epoch
    group by epochs.run_id, horizons.ablation, horizons.matched_horizon
)

select * from final
order by run_id
