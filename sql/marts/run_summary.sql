-- One row per run: its span of loaded epochs and the gaps in it, the final reward (mean over the last
-- getvariable('final_window') loaded epochs), the area under the curve (mean over all loaded epochs), the peak of
-- the EMA and the first epoch reaching it, and the compute-matched comparison: matched_horizon is the smallest
-- last epoch among the runs of the same ablation, matched_reward the mean over the last final_window loaded
-- epochs at or before it. Windows count loaded epochs, so a gap does not shorten them. Snapshot ids of the
-- final, best (peak EMA) and matched epochs. Mean rewards are the recomputed ones (finite rewards only).
with epochs as (
    select
        run_id,
        epoch,
        mean_reward,
        reward_ema
    from epoch_metrics
),

snapshot_ids as (
    select
        run_id,
        epoch,
        snapshot_id
    from fact_epochs
),

runs as (
    select
        run_id,
        ablation
    from dim_runs
),

-- `order by` in the averages fixes their summation order: a rebuild gives identical numbers at any thread count
spans as (
    select
        run_id,
        min(epoch) as first_epoch,
        max(epoch) as last_epoch,
        count(*) as n_epochs,
        avg(mean_reward order by epoch) as auc_reward,
        max(reward_ema) filter (where isfinite(reward_ema)) as peak_reward_ema
    from epochs
    group by run_id
),

-- a run missing from dim_runs is an ablation of its own
horizons as (
    select
        spans.*,
        coalesce(runs.ablation, spans.run_id) as ablation,
        min(spans.last_epoch) over (partition by coalesce(runs.ablation, spans.run_id)) as matched_horizon
    from spans
    left join runs using (run_id)
),

ranked as (
    select
        epochs.*,
        horizons.matched_horizon,
        horizons.peak_reward_ema,
        row_number() over (partition by epochs.run_id order by epochs.epoch desc) as rank_from_last,
        case when epochs.epoch <= horizons.matched_horizon then
            row_number() over (
                partition by epochs.run_id, epochs.epoch <= horizons.matched_horizon
                order by epochs.epoch desc
            )
        end as rank_from_horizon
    from epochs
    inner join horizons using (run_id)
),

windows as (
    select
        run_id,
        avg(mean_reward order by epoch) filter (where rank_from_last <= getvariable('final_window')) as final_reward,
        avg(mean_reward order by epoch) filter (where rank_from_horizon <= getvariable('final_window')) as matched_reward,
        max(epoch) filter (where rank_from_horizon is not null) as matched_epoch,
        -- "reaching" the peak allows for rounding: the debiased EMA of a flat curve wobbles in the last bits
        min(epoch) filter (where reward_ema >= peak_reward_ema - 1e-12 * greatest(1, abs(peak_reward_ema))) as peak_epoch
    from ranked
    group by run_id
),

final as (
    select
        horizons.run_id,
        horizons.first_epoch,
        horizons.last_epoch,
        horizons.n_epochs,
        horizons.last_epoch - horizons.first_epoch + 1 - horizons.n_epochs as missing_epochs,
        windows.final_reward,
        horizons.auc_reward,
        horizons.peak_reward_ema,
        windows.peak_epoch,
        horizons.matched_horizon,
        windows.matched_reward,
        final_snapshot.snapshot_id as final_snapshot_id,
        best_snapshot.snapshot_id as best_snapshot_id,
        matched_snapshot.snapshot_id as matched_snapshot_id,
        horizons.ablation,
        windows.matched_epoch
    from horizons
    inner join windows using (run_id)
    left join snapshot_ids as final_snapshot
        on final_snapshot.run_id = horizons.run_id and final_snapshot.epoch = horizons.last_epoch
    left join snapshot_ids as best_snapshot
        on best_snapshot.run_id = horizons.run_id and best_snapshot.epoch = windows.peak_epoch
    left join snapshot_ids as matched_snapshot
        on matched_snapshot.run_id = horizons.run_id and matched_snapshot.epoch = windows.matched_epoch
)

select * from final
order by run_id
