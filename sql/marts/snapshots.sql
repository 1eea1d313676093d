-- One row per run × role: the snapshot of the final epoch (last loaded), the best epoch (peak reward EMA) and the
-- compute-matched epoch (last loaded at or before the ablation's matched horizon), with the model name to call
-- it by: getvariable('snapshot_model_prefix') followed by the snapshot id.
with summaries as (
    select * from run_summary
),

roles as (
    select
        run_id,
        'final' as role,
        last_epoch as epoch,
        final_snapshot_id as snapshot_id,
        1 as role_order
    from summaries
    union all
    select
        run_id,
        'best' as role,
        peak_epoch as epoch,
        best_snapshot_id as snapshot_id,
        2 as role_order
    from summaries
    union all
    select
        run_id,
        'matched' as role,
        matched_epoch as epoch,
        matched_snapshot_id as snapshot_id,
        3 as role_order
    from summaries
),

final as (
    select
        run_id,
        role,
        epoch,
        snapshot_id,
        getvariable('snapshot_model_prefix') || snapshot_id as model_name,
        role_order
    from roles
)

select * exclude (role_order) from final
order by run_id, role_order
