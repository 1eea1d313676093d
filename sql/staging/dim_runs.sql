-- One row per run: its release, reward family, false-positive controls per group, group size, ablation, label, arm
-- (the configuration it is a seed of: unless the registry says otherwise, the run id without its seed suffix) and
-- whether that arm is its ablation's baseline (the registry's word; false by default).
with runs as (
    select * from lake.runs
),

final as (
    select
        run_id,
        release,
        reward_family,
        fp_per_group,
        group_size,
        ablation,
        label,
        arm,
        baseline,
        release_root
    from runs
)

select * from final
order by run_id
