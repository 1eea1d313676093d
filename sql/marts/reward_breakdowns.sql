-- One row per run × epoch window × breakdown × level: the mean reward by target model (`target_model`) and by
-- false-positive control flag (`is_fp_control`), over windows of getvariable('breakdown_window') epochs
-- (window_start = epoch // breakdown_window × breakdown_window). These are optional per-trajectory extras: a
-- release without one of the columns still builds (the column is read as all null) and a run without the extra
-- simply has no rows for that breakdown. Finite rewards only; n_trajectories counts every trajectory of the level.
with trajectories as (
    select
        run_id,
        epoch,
        traj_index,
        reward,
        target_model,
        is_fp_control
    -- union by name adds any optional extra the table lacks, as a null column, so the select always binds
    from (
        select * from fact_trajectories
        union all by name
        select
            null::varchar as target_model,
            null::varchar as is_fp_control
        where false
    ) as with_extras
),

-- an extra whose values mixed types across epochs is stored as JSON text (strings quoted): unquote it
normalised as (
    select
        run_id,
        epoch,
        traj_index,
        reward,
        case
            when starts_with(target_model::varchar, '"')
                then try(json_extract_string(target_model::varchar, '$'))
            else target_model::varchar
        end as target_model,
        try_cast(trim(is_fp_control::varchar, '"') as boolean) as is_fp_control
    from trajectories
),

levels as (
    select
        run_id,
        epoch,
        traj_index,
        reward,
        'target_model' as breakdown,
        target_model as level
    from normalised
    where target_model is not null
    union all
    select
        run_id,
        epoch,
        traj_index,
        reward,
        'is_fp_control' as breakdown,
        is_fp_control::varchar as level
    from normalised
    where is_fp_control is not null
),

windowed as (
    select
        *,
        epoch // getvariable('breakdown_window') * getvariable('breakdown_window') as window_start
    from levels
),

final as (
    select
        run_id,
        window_start,
        window_start + getvariable('breakdown_window') - 1 as window_end,
        breakdown,
        level,
        count(distinct epoch) as n_epochs,
        count(*) as n_trajectories,
        -- ordered sums: identical numbers on every rebuild, whatever the thread count
        -- divided by 2^32 (exact) and back: a sum past the largest float leaves the mean finite
        avg(reward / 4294967296 order by epoch, traj_index) filter (where isfinite(reward)) * 4294967296 as mean_reward,
        stddev_samp(reward order by epoch, traj_index) filter (where isfinite(reward)) as reward_std
    from windowed
    group by run_id, window_start, breakdown, level
)

select * from final
order by run_id, window_start, breakdown, level
