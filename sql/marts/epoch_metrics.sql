-- One row per run × epoch: trajectory and group counts, the recomputed mean reward (finite rewards only) beside
-- the file's own, the sample std of the rewards (TRL's reward_std since v0.27) and the mean of the groups' sample
-- stds (TRL's reward_std up to v0.26; groups of 2+ finite rewards), the share of groups with no learning signal,
-- TensorBoard's debiased EMA of the mean reward (weight getvariable('ema_weight')) and its trailing mean over the
-- epoch and up to getvariable('rolling_window') − 1 loaded epochs before it. An epoch with no finite reward has a
-- null mean_reward, which the EMA passes through without counting it.
with recursive epochs as (
    select
        run_id,
        epoch,
        n_trajectories,
        mean_reward as reported_mean_reward,
        sample_entropy,
        train_entropy
    from fact_epochs
),

trajectories as (
    select
        run_id,
        epoch,
        traj_index,
        reward,
        advantage
    from fact_trajectories
),

groups as (
    select
        run_id,
        epoch,
        group_index,
        is_zero_std,
        n_finite_rewards,
        reward_std
    from group_metrics
),

-- Each epoch's trajectories gathered into one list and sorted by traj_index: the list aggregates below add in that
-- order, so parallel execution cannot change the last bits and a rebuild gives identical numbers (one sort per
-- epoch, where each `order by` in an aggregate sorts again, as the group averages below do). A mean sums values
-- divided by 2^32 (exact for a float, and the same bits), so that finite rewards whose sum overflows (every reward
-- 1e308) still have their finite mean.
epoch_trajectories as (
    select
        run_id,
        epoch,
        count(*) filter (where not coalesce(isfinite(reward), false)) as n_nonfinite_rewards,
        list_sort(list({ 'traj_index': traj_index, 'reward': reward, 'advantage': advantage })) as trajectories
    from trajectories
    group by run_id, epoch
),

-- each epoch's finite rewards and finite advantages, in traj_index order
finite_values as (
    select
        run_id,
        epoch,
        n_nonfinite_rewards,
        list_transform(list_filter(trajectories, lambda t: isfinite(t['reward'])), lambda t: t['reward'])
            as finite_rewards,
        list_transform(list_filter(trajectories, lambda t: isfinite(t['advantage'])), lambda t: t['advantage'])
            as finite_advantages
    from epoch_trajectories
),

reward_stats as (
    select
        run_id,
        epoch,
        list_aggregate(list_transform(finite_rewards, lambda r: r / 4294967296), 'avg') * 4294967296 as mean_reward,
        list_aggregate(finite_rewards, 'stddev_samp') as reward_std,
        n_nonfinite_rewards,
        list_aggregate(list_transform(finite_advantages, lambda a: a / 4294967296), 'avg') * 4294967296
            as mean_advantage
    from finite_values
),

group_stats as (
    select
        run_id,
        epoch,
        count(*) as n_groups,
        -- only groups of 2+ finite rewards can have a spread at all
        avg(case when is_zero_std then 1.0 else 0.0 end order by group_index) filter (where n_finite_rewards >= 2)
            as frac_zero_std_groups,
        avg(reward_std order by group_index) filter (where n_finite_rewards >= 2) as mean_group_reward_std
    from groups
    group by run_id, epoch
),

-- materialized: the recursion below reads it once per step
joined as materialized (
    select
        epochs.run_id,
        epochs.epoch,
        epochs.n_trajectories,
        coalesce(group_stats.n_groups, 0) as n_groups,
        reward_stats.mean_reward,
        epochs.reported_mean_reward,
        reward_stats.reward_std,
        group_stats.mean_group_reward_std,
        group_stats.frac_zero_std_groups,
        coalesce(reward_stats.n_nonfinite_rewards, 0) as n_nonfinite_rewards,
        reward_stats.mean_advantage,
        epochs.sample_entropy,
        epochs.train_entropy,
        row_number() over (partition by epochs.run_id order by epochs.epoch) as epoch_rank
    from epochs
    left join reward_stats using (run_id, epoch)
    left join group_stats using (run_id, epoch)
),

-- TensorBoard's smoothing, one loaded epoch at a time: last = w·last + (1−w)·y and n += 1 for a finite y,
-- value last / (1 − wⁿ); a non-finite y is its own value and leaves last and n alone. Recursion rather than
-- a closed form: the closed form needs w⁻ⁿ, which overflows after a few thousand epochs.
ema_steps (run_id, epoch_rank, ema_last, ema_count, reward_ema) as (
    select
        run_id,
        epoch_rank,
        if(isfinite(mean_reward), (1 - getvariable('ema_weight')) * mean_reward, 0.0),
        if(isfinite(mean_reward), 1, 0),
        if(
            isfinite(mean_reward),
            (1 - getvariable('ema_weight')) * mean_reward
            / if(getvariable('ema_weight') = 1, 1, 1 - getvariable('ema_weight')),
            mean_reward
        )
    from joined
    where epoch_rank = 1

    union all

    select
        step.run_id,
        step.epoch_rank,
        if(
            isfinite(step.mean_reward),
            previous.ema_last * getvariable('ema_weight') + (1 - getvariable('ema_weight')) * step.mean_reward,
            previous.ema_last
        ),
        previous.ema_count + if(isfinite(step.mean_reward), 1, 0),
        if(
            isfinite(step.mean_reward),
            (previous.ema_last * getvariable('ema_weight') + (1 - getvariable('ema_weight')) * step.mean_reward)
            -- w = 1 never debiases in TensorBoard (and 1 − 1ⁿ would divide by 0)
            / if(getvariable('ema_weight') = 1, 1, 1 - pow(getvariable('ema_weight'), previous.ema_count + 1)),
            step.mean_reward
        )
    from ema_steps as previous
    inner join joined as step
        on previous.run_id = step.run_id and step.epoch_rank = previous.epoch_rank + 1
),

final as (
    select
        joined.run_id,
        joined.epoch,
        joined.n_trajectories,
        joined.n_groups,
        joined.mean_reward,
        joined.reported_mean_reward,
        joined.reward_std,
        joined.mean_group_reward_std,
        joined.frac_zero_std_groups,
        ema_steps.reward_ema,
        -- the window's means listed in epoch order and averaged in that order, as above: a windowed avg adds them
        -- in an order that depends on the other runs in the query and the thread count
        4294967296 * list_aggregate(
            list(joined.mean_reward / 4294967296 order by joined.epoch) over (
                partition by joined.run_id
                order by joined.epoch
                -- sqlfluff's DuckDB grammar takes only a number as a frame's offset, not an expression
                rows between getvariable('rolling_window') - 1 preceding and current row  -- noqa: PRS
            ),
            'avg'
        ) as reward_rolling,
        joined.n_nonfinite_rewards,
        joined.mean_advantage,
        joined.sample_entropy,
        joined.train_entropy
    from joined
    inner join ema_steps using (run_id, epoch_rank)
)

select * from final
order by run_id, epoch
