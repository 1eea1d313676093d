-- One row per run × epoch window × breakdown × level: the mean reward by target model (`target_model`) and by
-- false-positive control flag (`is_fp_control`), over windows of getvariable('breakdown_window') epochs
-- (window_start = epoch // breakdown_window × breakdown_window). These are optional per-trajectory extras: a
-- release without one of the columns still builds (the column is read as all null) and a run without the extra
-- simply has no rows for that breakdown. Finite rewards only; n_trajectories counts every trajectory of the level.
with trajectories as not materialized (
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

-- an extra whose values mixed types across epochs is stored as JSON text (strings quoted): unquote it, once per
-- distinct text (a release has a handful) rather than once per trajectory
target_models as (
    select
        target_model,
        case
            when starts_with(target_model, '"') then try(json_extract_string(target_model, '$'))
            else target_model
        end as level
    from (select distinct target_model::varchar as target_model from trajectories) as distinct_texts
),

fp_controls as (
    select
        is_fp_control,
        try_cast(trim(is_fp_control, '"') as boolean)::varchar as level
    from (select distinct is_fp_control::varchar as is_fp_control from trajectories) as distinct_texts
),

levels as not materialized (
    select
        trajectories.run_id,
        trajectories.epoch,
        trajectories.traj_index,
        trajectories.reward,
        'target_model' as breakdown,
        target_models.level
    from trajectories
    inner join target_models on trajectories.target_model::varchar = target_models.target_model
    where target_models.level is not null
    union all
    select
        trajectories.run_id,
        trajectories.epoch,
        trajectories.traj_index,
        trajectories.reward,
        'is_fp_control' as breakdown,
        fp_controls.level
    from trajectories
    inner join fp_controls on trajectories.is_fp_control::varchar = fp_controls.is_fp_control
    where fp_controls.level is not null
),

windowed as not materialized (
    select
        *,
        epoch // getvariable('breakdown_window') * getvariable('breakdown_window') as window_start
    from levels
),

-- the epochs of each level's window with at least one of its trajectories, apart from the sums below: a distinct
-- count beside them splits the group-by in two over a materialized copy of every trajectory's level
level_epochs as (
    select
        run_id,
        window_start,
        breakdown,
        level,
        count(*) as n_epochs
    from (
        select distinct
            run_id,
            window_start,
            breakdown,
            level,
            epoch
        from windowed
    ) as epochs
    group by run_id, window_start, breakdown, level
),

sums as (
    select
        run_id,
        window_start,
        breakdown,
        level,
        count(*) as n_trajectories,
        -- ordered sums: identical numbers on every rebuild, whatever the thread count
        -- divided by 2^32 (exact) and back: a sum past the largest float leaves the mean finite
        avg(reward / 4294967296 order by epoch, traj_index) filter (where isfinite(reward)) * 4294967296 as mean_reward,
        stddev_samp(reward order by epoch, traj_index) filter (where isfinite(reward)) as reward_std
    from windowed
    group by run_id, window_start, breakdown, level
),

final as (
    select
        sums.run_id,
        sums.window_start,
        sums.window_start + getvariable('breakdown_window') - 1 as window_end,
        sums.breakdown,
        sums.level,
        level_epochs.n_epochs,
        sums.n_trajectories,
        sums.mean_reward,
        sums.reward_std
    from sums
    inner join level_epochs using (run_id, window_start, breakdown, level)
)

select * from final
order by run_id, window_start, breakdown, level
