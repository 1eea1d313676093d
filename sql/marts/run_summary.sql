-- One row per run: its span of loaded epochs and the gaps in it, the final reward (mean over the last
-- getvariable('final_window') loaded epochs), the area under the curve (mean over all loaded epochs), the peak of
-- the EMA and the first epoch reaching it, and the compute-matched comparison: matched_horizon is the smallest
-- last epoch among the runs of the same ablation, matched_reward the mean over the last final_window loaded
-- epochs at or before it. Windows count loaded epochs, so a gap does not shorten them. Snapshot ids of the
-- final, best (peak EMA) and matched epochs. Mean rewards are the recomputed ones (finite rewards only).
-- The matched reward's own interval at getvariable('ci_level') (matched_ci_low/high) is for the expected mean of the
-- window under the run's own process (what the window would average over replays of this run), by
-- getvariable('ci_method') (docs/statistics.md), computed by pipelines/stats/intervals.run_interval from the run's
-- series (matched_series); matched_ci_note says why it backs no claim when the method cannot hold its level there
-- (too few epochs). matched_effective_n: the window's epochs worth of independent ones; matched_iqm: the
-- interquartile mean of the window (the middle half of its values after dropping floor(n/4) at each end, as rliable's
-- IQM); matched_std_error, matched_ci_df (null: a normal quantile) and matched_ar_coefficient come from the same fit.
-- Incremental on run_id: a run's row reads its own epochs and series and its ablation's horizon (run_horizons).
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

matched_horizons as (
    select
        run_id,
        ablation,
        matched_horizon
    from run_horizons
),

series as (
    select
        run_id,
        epochs,
        mean_rewards,
        noise_variances
    from matched_series
),

-- `order by` in the averages fixes their summation order: a rebuild gives identical numbers at any thread count;
-- they sum values divided by 2^32 (exact), so that a sum past the largest float leaves the mean finite
spans as (
    select
        run_id,
        min(epoch) as first_epoch,
        max(epoch) as last_epoch,
        count(*) as n_epochs,
        avg(mean_reward / 4294967296 order by epoch) * 4294967296 as auc_reward,
        max(reward_ema) filter (where isfinite(reward_ema)) as peak_reward_ema
    from epochs
    group by run_id
),

-- each run's ablation and its compute-matched horizon, computed across the ablation's runs by run_horizons
horizons as (
    select
        spans.*,
        matched_horizons.ablation,
        matched_horizons.matched_horizon
    from spans
    inner join matched_horizons using (run_id)
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
        avg(mean_reward / 4294967296 order by epoch) filter (where rank_from_last <= getvariable('final_window'))
        * 4294967296
            as final_reward,
        avg(mean_reward / 4294967296 order by epoch) filter (where rank_from_horizon <= getvariable('final_window'))
        * 4294967296
            as matched_reward,
        max(epoch) filter (where rank_from_horizon is not null) as matched_epoch,
        -- "reaching" the peak allows for rounding: the debiased EMA of a flat curve wobbles in the last bits
        min(epoch) filter (where reward_ema >= peak_reward_ema - 1e-12 * greatest(1, abs(peak_reward_ema)))
            as peak_epoch
    from ranked
    group by run_id
),

-- the run's own interval at getvariable('ci_level') by getvariable('ci_method'), computed once per run from its series
-- by pipelines/stats/intervals.run_interval (registered on the connection by pipelines/stats/sql_functions.py)
fits as materialized (
    select
        run_id,
        run_interval(
            epochs,
            mean_rewards,
            noise_variances,
            getvariable('final_window'),
            getvariable('ci_method'),
            getvariable('ci_level'),
            getvariable('ci_fit_epochs')
        ) as fit
    from series
),

-- the window's finite values in order, for the interquartile mean
window_ranks as (
    select
        run_id,
        mean_reward,
        row_number() over (partition by run_id order by mean_reward, epoch) as value_rank,
        count(*) over (partition by run_id) as n_values
    from ranked
    where rank_from_horizon <= getvariable('final_window') and isfinite(mean_reward)
),

iqms as (
    select
        run_id,
        avg(mean_reward order by value_rank) as matched_iqm
    from window_ranks
    where value_rank > n_values // 4 and value_rank <= n_values - n_values // 4
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
        fits.fit.ci_low as matched_ci_low,
        fits.fit.ci_high as matched_ci_high,
        iqms.matched_iqm,
        fits.fit.effective_n as matched_effective_n,
        final_snapshot.snapshot_id as final_snapshot_id,
        best_snapshot.snapshot_id as best_snapshot_id,
        matched_snapshot.snapshot_id as matched_snapshot_id,
        horizons.ablation,
        windows.matched_epoch,
        sqrt(fits.fit.variance) as matched_std_error,
        fits.fit.df as matched_ci_df,
        fits.fit.ar_coefficient as matched_ar_coefficient,
        fits.fit.reason as matched_ci_note
    from horizons
    inner join windows using (run_id)
    left join fits using (run_id)
    left join iqms using (run_id)
    left join snapshot_ids as final_snapshot
        on horizons.run_id = final_snapshot.run_id and horizons.last_epoch = final_snapshot.epoch
    left join snapshot_ids as best_snapshot
        on horizons.run_id = best_snapshot.run_id and windows.peak_epoch = best_snapshot.epoch
    left join snapshot_ids as matched_snapshot
        on horizons.run_id = matched_snapshot.run_id and windows.matched_epoch = matched_snapshot.epoch
)

select * from final
order by run_id
