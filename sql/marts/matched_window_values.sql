-- One row per run × epoch of its matched window with a finite mean reward: the last getvariable('final_window')
-- loaded epochs at or before the ablation's compute-matched horizon (the epochs run_summary's matched_reward
-- averages), those whose mean reward is finite. position counts them from 0 in epoch order, n_values per run.
-- ablation_contrasts compares these values pair by pair for prob_improvement.
with summaries as (
    select
        run_id,
        matched_horizon
    from run_summary
),

epochs as (
    select
        run_id,
        epoch,
        mean_reward
    from epoch_metrics
),

matched_windows as (
    select
        epochs.run_id,
        epochs.epoch,
        epochs.mean_reward,
        row_number() over (partition by epochs.run_id order by epochs.epoch desc) as rank_from_horizon
    from epochs
    inner join summaries
        on epochs.run_id = summaries.run_id and epochs.epoch <= summaries.matched_horizon
    qualify rank_from_horizon <= getvariable('final_window')
),

final as (
    select
        run_id,
        epoch,
        mean_reward,
        row_number() over (partition by run_id order by epoch) - 1 as position,
        count(*) over (partition by run_id) as n_values
    from matched_windows
    where isfinite(mean_reward)
)

select * from final
order by run_id, position
