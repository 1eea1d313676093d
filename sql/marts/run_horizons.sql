-- One row per run with a loaded epoch: its ablation (a run missing from dim_runs is an ablation of its own) and the
-- ablation's compute-matched horizon, the smallest last loaded epoch among its runs. This is the one part of
-- run_summary that reads other runs' rows: kept apart, it lets run_summary compute again, after a change, only the
-- rows of the runs that changed and of those whose horizon moved.
with epochs as (
    select
        run_id,
        epoch
    from epoch_metrics
),

runs as (
    select
        run_id,
        ablation
    from dim_runs
),

last_epochs as (
    select
        run_id,
        max(epoch) as last_epoch
    from epochs
    group by run_id
),

final as (
    select
        last_epochs.run_id,
        coalesce(runs.ablation, last_epochs.run_id) as ablation,
        min(last_epochs.last_epoch) over (partition by coalesce(runs.ablation, last_epochs.run_id))
            as matched_horizon
    from last_epochs
    left join runs using (run_id)
)

select * from final
order by run_id
