-- One row per epoch document whose values were loaded as they are but deserve a reader's eye: a null among its
-- rewards or advantages (loaded as null), an infinite one (a number too large for a float such as 1e309, or an
-- Infinity token; left out of the recomputed means), finite rewards whose sum overflows a float (every reward
-- 1e308: the recomputed mean is taken without overflowing); and one row per run whose group size does not divide
-- an epoch's trajectory count (the last group of such an epoch is partial: group_metrics.is_partial).
with trajectories as (
    select
        run_id,
        epoch,
        source_path,
        traj_index,
        reward,
        advantage
    from fact_trajectories
),

epochs as (
    select
        run_id,
        epoch,
        n_trajectories
    from fact_epochs
),

runs as (
    select
        run_id,
        group_size
    from dim_runs
),

per_document as (
    select
        run_id,
        epoch,
        source_path,
        count(*) filter (where reward is null) as null_rewards,
        min(traj_index) filter (where reward is null) as first_null_reward,
        count(*) filter (where advantage is null) as null_advantages,
        min(traj_index) filter (where advantage is null) as first_null_advantage,
        count(*) filter (where isinf(reward)) as infinite_rewards,
        min(traj_index) filter (where isinf(reward)) as first_infinite_reward,
        count(*) filter (where isinf(advantage)) as infinite_advantages,
        min(traj_index) filter (where isinf(advantage)) as first_infinite_advantage,
        coalesce(isinf(sum(reward) filter (where isfinite(reward))), false) as reward_sum_overflows
    from trajectories
    group by run_id, epoch, source_path
),

nulls as (
    select
        run_id,
        source_path,
        epoch,
        'null_value' as error_kind,
        concat_ws(
            '; ',
            case
                when null_rewards > 0
                    then 'rewards: ' || null_rewards || ' null(s), the first at position ' || first_null_reward
            end,
            case
                when null_advantages > 0
                    then 'advantages: ' || null_advantages || ' null(s), the first at position ' || first_null_advantage
            end
        ) as message,
        'loaded: null' as action
    from per_document
    where null_rewards + null_advantages > 0
),

infinities as (
    select
        run_id,
        source_path,
        epoch,
        'infinite_value' as error_kind,
        concat_ws(
            '; ',
            case
                when infinite_rewards > 0
                    then
                        'rewards: ' || infinite_rewards || ' infinite value(s), the first at position '
                        || first_infinite_reward
            end,
            case
                when infinite_advantages > 0
                    then
                        'advantages: ' || infinite_advantages || ' infinite value(s), the first at position '
                        || first_infinite_advantage
            end
        ) || ' (a number too large for a float, such as 1e309, or an Infinity token)' as message,
        'loaded: infinite, left out of the recomputed means' as action
    from per_document
    where infinite_rewards + infinite_advantages > 0
),

overflows as (
    select
        run_id,
        source_path,
        epoch,
        'mean_overflow' as error_kind,
        'the sum of the finite rewards overflows a float' as message,
        'loaded: the recomputed mean taken without overflowing' as action
    from per_document
    where reward_sum_overflows
),

epochs_with_partial_groups as (
    select
        epochs.run_id,
        epochs.epoch,
        epochs.n_trajectories,
        runs.group_size
    from epochs
    inner join runs on epochs.run_id = runs.run_id
    where epochs.n_trajectories % runs.group_size != 0
),

partial_groups as (
    select
        run_id,
        run_id || '/' as source_path,
        min(epoch) as epoch,
        'partial_group' as error_kind,
        'group_size ' || any_value(group_size) || ' does not divide the trajectory count of ' || count(*)
        || ' epoch(s) (epoch ' || min(epoch) || ': ' || arg_min(n_trajectories, epoch)
        || ' trajectories); the last group of each is partial' as message,
        'loaded: groups of group_size trajectories in order, the last one smaller (group_metrics.is_partial)'
            as action
    from epochs_with_partial_groups
    group by run_id
),

final as (
    select
        *,
        'warning' as severity
    from nulls
    union all by name
    select
        *,
        'warning' as severity
    from infinities
    union all by name
    select
        *,
        'warning' as severity
    from overflows
    union all by name
    select
        *,
        'warning' as severity
    from partial_groups
)

select
    source_path,
    run_id,
    epoch,
    error_kind,
    message,
    severity,
    action
from final
order by run_id, source_path, error_kind
