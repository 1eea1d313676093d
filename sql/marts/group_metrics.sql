-- One row per run × epoch × GRPO group (group_index = traj_index // group_size): its size (is_partial: fewer than
-- group_size trajectories, the last group of an epoch whose count group_size does not divide), reward mean and
-- sample std over the finite rewards, whether it carries no learning signal (2+ finite rewards, all equal),
-- and whether its advantages are normalised within the group. The advantage test is convention-agnostic
-- (trainers differ on the std's ddof and epsilon): over the trajectories with a finite reward, the advantages
-- must average to 0 and be an increasing affine function of the rewards (correlation 1), or be all 0 when
-- those rewards are all equal. Trajectories with a non-finite reward are not tested (trainers give them 0 or
-- drop them). Tolerance: getvariable('advantage_tolerance').
with trajectories as not materialized (
    select
        run_id,
        epoch,
        group_index,
        traj_index,
        reward,
        advantage
    from fact_trajectories
),

runs as (
    select
        run_id,
        group_size
    from dim_runs
),

-- Each group's trajectories with a finite reward, gathered and sorted by traj_index: the list aggregates below add
-- in that order, so parallel execution cannot change the last bits of their sums and a rebuild gives identical
-- numbers (one sort per group, where each `order by` in an aggregate sorts again). A mean sums values divided by
-- 2^32 (exact), so that a sum past the largest float leaves the mean finite.
gathered as (
    select
        run_id,
        epoch,
        group_index,
        count(*) as n_trajectories,
        count(*) filter (where isfinite(reward)) as n_finite_rewards,
        min(reward) filter (where isfinite(reward)) as reward_min,
        max(reward) filter (where isfinite(reward)) as reward_max,
        max(abs(advantage)) filter (where isfinite(reward)) as advantage_max_abs,
        count(*) filter (where isfinite(reward) and not coalesce(isfinite(advantage), false)) as n_bad_advantages,
        list_sort(
            list({ 'traj_index': traj_index, 'reward': reward, 'advantage': advantage }) filter (where isfinite(reward))
        ) as finite_trajectories
    from trajectories
    group by run_id, epoch, group_index
),

-- an aggregate of its own: beside the list above, in one group-by, it costs several times more
correlations as (
    select
        run_id,
        epoch,
        group_index,
        corr(reward, advantage order by traj_index) filter (where isfinite(reward) and isfinite(advantage))
            as advantage_reward_corr
    from trajectories
    group by run_id, epoch, group_index
),

means as (
    select
        * exclude (finite_trajectories),
        list_aggregate(list_transform(finite_trajectories, lambda t: t['reward'] / 4294967296), 'avg') * 4294967296
            as reward_mean,
        list_aggregate(list_transform(finite_trajectories, lambda t: t['reward']), 'stddev_samp') as reward_std,
        list_aggregate(list_transform(finite_trajectories, lambda t: t['advantage'] / 4294967296), 'avg') * 4294967296
            as advantage_mean
    from gathered
),

groups as (
    select
        means.*,
        correlations.advantage_reward_corr
    from means
    inner join correlations using (run_id, epoch, group_index)
),

classified as (
    select
        *,
        n_finite_rewards >= 2 and reward_min = reward_max as is_zero_std,
        coalesce(reward_min = reward_max, true) as rewards_flat
    from groups
),

judged as (
    select
        *,
        case
            when n_bad_advantages > 0
                then n_bad_advantages || ' trajectory(ies) with a finite reward have a missing or non-finite advantage'
            when rewards_flat and advantage_max_abs > getvariable('advantage_tolerance')
                then 'rewards all equal but advantages are not all 0 (max |advantage| '
                    || round(advantage_max_abs, 6) || ')'
            when not rewards_flat and abs(advantage_mean) > getvariable('advantage_tolerance')
                then 'advantages do not average to 0 (mean ' || round(advantage_mean, 6) || ')'
            when not rewards_flat
                -- corr is NaN when the advantages are constant, and DuckDB orders NaN above every number
                and not coalesce(
                    isfinite(advantage_reward_corr)
                    and advantage_reward_corr >= 1 - getvariable('advantage_tolerance'),
                    false
                )
                then 'advantages are not an increasing affine function of the rewards (correlation '
                    || coalesce(round(advantage_reward_corr, 6)::varchar, 'undefined') || ')'
        end as advantage_problem
    from classified
),

sized as (
    select
        judged.*,
        judged.n_trajectories < runs.group_size as is_partial
    from judged
    inner join runs on judged.run_id = runs.run_id
),

final as (
    select
        run_id,
        epoch,
        group_index,
        n_trajectories,
        is_partial,
        n_finite_rewards,
        reward_mean,
        reward_std,
        is_zero_std,
        advantage_mean,
        advantage_reward_corr,
        advantage_problem is null as advantages_consistent,
        advantage_problem
    from sized
)

select * from final
order by run_id, epoch, group_index
