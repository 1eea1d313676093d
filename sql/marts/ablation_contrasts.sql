-- One row per unordered pair of arms in an ablation (an arm is the configuration a run is a seed of; dim_runs.arm,
-- the run itself by default), so one row per pair of runs when every arm has one run. getvariable('ci_level')
-- intervals; resolved when the interval excludes zero.
-- Arms of one run each (unit `epochs of one run`): run_a < run_b are the runs, delta = matched_reward(run_b) −
-- matched_reward(run_a), and the interval follows getvariable('ci_method'): `reml` (docs/statistics.md) combines
-- the two runs' own matched standard errors (run_summary) with a normal quantile (its variances taken as known),
-- `ar1` with a Welch t quantile; `iid` is the percentile interval of the differences of the two runs' bootstrap
-- means (bootstrap_means: the window's epochs resampled as if independent, which autocorrelated epochs are not;
-- kept for comparison with tools that report it). prob_improvement: the
-- share of (epoch of run_b, epoch of run_a) pairs of the two matched windows where run_b's mean reward is higher,
-- ties counting one half (the Mann–Whitney count; descriptive, epochs are not independent). Such a claim is
-- about these two runs, not about their configurations.
-- Arms of two or more runs each (unit `runs`): run_a < run_b are the arm names, delta = IQM(arm_b) − IQM(arm_a)
-- of the runs' matched rewards, and the interval is rliable's stratified bootstrap: each arm's runs resampled with
-- replacement, getvariable('bootstrap_reps') times, the IQM of each resample, the percentile interval of the
-- differences; prob_improvement is the Mann–Whitney share over (run of arm_b, run of arm_a) pairs. An arm of one
-- run against an arm of several has no interval: resampling one run cannot show a configuration's spread.
-- Draws come from md5(seed, arm, replicate, draw), not random(), so a rebuild gives the same numbers.
with summaries as (
    select
        run_id,
        ablation,
        matched_horizon,
        matched_reward,
        matched_std_error,
        matched_ci_df
    from run_summary
),

runs as (
    select
        run_id,
        arm
    from dim_runs
),

window_values as (
    select
        run_id,
        position,
        mean_reward
    from matched_window_values
),

resampled_means as (
    select
        run_id,
        replicate,
        resampled_mean
    from bootstrap_means
),

-- each run's arm (a run missing from dim_runs is its own), and its position among the arm's runs
members as (
    select
        summaries.*,
        coalesce(runs.arm, summaries.run_id) as arm,
        row_number() over (
            partition by summaries.ablation, coalesce(runs.arm, summaries.run_id)
            order by summaries.run_id
        ) - 1 as run_position,
        count(*) over (partition by summaries.ablation, coalesce(runs.arm, summaries.run_id)) as arm_runs
    from summaries
    left join runs using (run_id)
),

arms as (
    select
        ablation,
        arm,
        any_value(run_id) as run_id,
        any_value(arm_runs) as arm_runs,
        min(matched_horizon) as matched_horizon
    from members
    group by ablation, arm
),

-- a single run's arm is named by its run id in run_a/run_b, an arm of several runs by its name
arm_pairs as (
    select
        arm_a.ablation,
        arm_a.arm as arm_a,
        arm_b.arm as arm_b,
        if(arm_a.arm_runs = 1, arm_a.run_id, arm_a.arm) as run_a,
        if(arm_b.arm_runs = 1, arm_b.run_id, arm_b.arm) as run_b,
        arm_a.arm_runs as n_runs_a,
        arm_b.arm_runs as n_runs_b,
        least(arm_a.matched_horizon, arm_b.matched_horizon) as matched_horizon,
        case
            when arm_a.arm_runs = 1 and arm_b.arm_runs = 1 then 'epochs of one run'
            else 'runs'
        end as unit
    from arms as arm_a
    inner join arms as arm_b
        on arm_a.ablation = arm_b.ablation
        and if(arm_b.arm_runs = 1, arm_b.run_id, arm_b.arm) > if(arm_a.arm_runs = 1, arm_a.run_id, arm_a.arm)
),

-- one run per arm: the two runs' matched rewards and their own standard errors
run_pairs as (
    select
        arm_pairs.*,
        run_b.matched_reward - run_a.matched_reward as delta,
        run_a.matched_reward as matched_reward_a,
        run_b.matched_reward as matched_reward_b,
        sqrt(run_a.matched_std_error ^ 2 + run_b.matched_std_error ^ 2) as std_error,
        -- Welch–Satterthwaite degrees of freedom of the difference
        (run_a.matched_std_error ^ 2 + run_b.matched_std_error ^ 2) ^ 2
        / (run_a.matched_std_error ^ 4 / run_a.matched_ci_df + run_b.matched_std_error ^ 4 / run_b.matched_ci_df)
            as welch_df
    from arm_pairs
    inner join members as run_a on arm_pairs.ablation = run_a.ablation and arm_pairs.arm_a = run_a.arm
    inner join members as run_b on arm_pairs.ablation = run_b.ablation and arm_pairs.arm_b = run_b.arm
    where arm_pairs.unit = 'epochs of one run'
),

epoch_bootstrap as (
    select
        run_pairs.run_a,
        run_pairs.run_b,
        quantile_cont(mean_b.resampled_mean - mean_a.resampled_mean, (1 - getvariable('ci_level')) / 2) as ci_low,
        quantile_cont(mean_b.resampled_mean - mean_a.resampled_mean, (1 + getvariable('ci_level')) / 2) as ci_high
    from run_pairs
    inner join resampled_means as mean_a on run_pairs.run_a = mean_a.run_id
    inner join resampled_means as mean_b on run_pairs.run_b = mean_b.run_id and mean_a.replicate = mean_b.replicate
    group by run_pairs.run_a, run_pairs.run_b
),

epoch_improvements as (
    select
        run_pairs.run_a,
        run_pairs.run_b,
        avg(mann_whitney_score(value_b.mean_reward, value_a.mean_reward)) as prob_improvement,
        count(distinct value_a.position) as n_window_epochs_a,
        count(distinct value_b.position) as n_window_epochs_b
    from run_pairs
    inner join window_values as value_a on run_pairs.run_a = value_a.run_id
    inner join window_values as value_b on run_pairs.run_b = value_b.run_id
    group by run_pairs.run_a, run_pairs.run_b
),

epoch_contrasts as (
    select
        run_pairs.ablation,
        run_pairs.run_a,
        run_pairs.run_b,
        run_pairs.delta,
        case
            when getvariable('ci_method') = 'iid' then epoch_bootstrap.ci_low
            -- two flat windows have no spread to build an interval from
            when getvariable('ci_method') in ('ar1', 'reml') then if(
                    run_pairs.std_error > 0,
                    run_pairs.delta
                    - interval_quantile((1 - getvariable('ci_level')) / 2, run_pairs.welch_df) * run_pairs.std_error,
                    null
                )
        end as ci_low,
        case
            when getvariable('ci_method') = 'iid' then epoch_bootstrap.ci_high
            when getvariable('ci_method') in ('ar1', 'reml') then if(
                    run_pairs.std_error > 0,
                    run_pairs.delta
                    + interval_quantile((1 - getvariable('ci_level')) / 2, run_pairs.welch_df) * run_pairs.std_error,
                    null
                )
        end as ci_high,
        getvariable('ci_method') as ci_method,
        epoch_improvements.prob_improvement,
        run_pairs.matched_reward_a,
        run_pairs.matched_reward_b,
        epoch_improvements.n_window_epochs_a,
        epoch_improvements.n_window_epochs_b
    from run_pairs
    left join epoch_bootstrap using (run_a, run_b)
    left join epoch_improvements using (run_a, run_b)
),

-- arms of several runs: the runs with a matched reward, numbered within their arm for the draws
arm_values as (
    select
        ablation,
        arm,
        matched_reward,
        row_number() over (partition by ablation, arm order by run_id) - 1 as position,
        count(*) over (partition by ablation, arm) as n_values
    from members
    where arm_runs >= 2 and isfinite(matched_reward)
),

replicates as (
    select generate_series as replicate
    from generate_series(1, getvariable('bootstrap_reps'))
),

arm_sizes as (
    select distinct
        ablation,
        arm,
        n_values
    from arm_values
),

arm_replicates as (
    select 0 as replicate
    union all
    select replicate from replicates
),

-- replicate 0 is the arm's runs themselves; the others draw as many runs, with replacement
arm_draws as (
    select
        sizes.ablation,
        sizes.arm,
        replicates.replicate,
        draw.i as draw_index,
        if(
            replicates.replicate = 0,
            draw.i,
            (
                md5_number_lower(concat_ws(
                    ':', getvariable('bootstrap_seed'), sizes.ablation, sizes.arm, replicates.replicate, draw.i
                ))
                % sizes.n_values::ubigint
            )::bigint
        ) as position
    from arm_sizes as sizes
    cross join arm_replicates as replicates
    -- a lateral subquery, which reads the row beside it, cannot be a CTE
    cross join lateral (select unnest(range(sizes.n_values)) as i) as draw  -- noqa: ST05
),

-- the interquartile mean of each resample: the middle values after dropping floor(n/4) at each end
arm_iqms as (
    select
        ablation,
        arm,
        replicate,
        avg(matched_reward order by value_rank) filter (
            where value_rank > n_values // 4 and value_rank <= n_values - n_values // 4
        ) as iqm
    from (
        select
            arm_draws.ablation,
            arm_draws.arm,
            arm_draws.replicate,
            arm_values.matched_reward,
            arm_values.n_values,
            row_number() over (
                partition by arm_draws.ablation, arm_draws.arm, arm_draws.replicate
                order by arm_values.matched_reward, arm_draws.draw_index
            ) as value_rank
        from arm_draws
        inner join arm_values using (ablation, arm, position)
    ) as ranked
    group by ablation, arm, replicate
),

run_contrasts as (
    select
        arm_pairs.ablation,
        arm_pairs.run_a,
        arm_pairs.run_b,
        any_value(iqm_b.iqm - iqm_a.iqm) filter (where iqm_a.replicate = 0) as delta,
        quantile_cont(iqm_b.iqm - iqm_a.iqm, (1 - getvariable('ci_level')) / 2) filter (where iqm_a.replicate > 0)
            as ci_low,
        quantile_cont(iqm_b.iqm - iqm_a.iqm, (1 + getvariable('ci_level')) / 2) filter (where iqm_a.replicate > 0)
            as ci_high,
        any_value(iqm_a.iqm) filter (where iqm_a.replicate = 0) as matched_reward_a,
        any_value(iqm_b.iqm) filter (where iqm_a.replicate = 0) as matched_reward_b
    from arm_pairs
    inner join arm_iqms as iqm_a on arm_pairs.ablation = iqm_a.ablation and arm_pairs.arm_a = iqm_a.arm
    inner join arm_iqms as iqm_b
        on arm_pairs.ablation = iqm_b.ablation and arm_pairs.arm_b = iqm_b.arm and iqm_a.replicate = iqm_b.replicate
    where arm_pairs.unit = 'runs' and arm_pairs.n_runs_a >= 2 and arm_pairs.n_runs_b >= 2
    group by arm_pairs.ablation, arm_pairs.run_a, arm_pairs.run_b
),

run_improvements as (
    select
        arm_pairs.ablation,
        arm_pairs.run_a,
        arm_pairs.run_b,
        avg(mann_whitney_score(value_b.matched_reward, value_a.matched_reward)) as prob_improvement
    from arm_pairs
    inner join arm_values as value_a on arm_pairs.ablation = value_a.ablation and arm_pairs.arm_a = value_a.arm
    inner join arm_values as value_b on arm_pairs.ablation = value_b.ablation and arm_pairs.arm_b = value_b.arm
    where arm_pairs.unit = 'runs'
    group by arm_pairs.ablation, arm_pairs.run_a, arm_pairs.run_b
),

contrasts as (
    select * from epoch_contrasts
    union all by name
    select
        arm_pairs.ablation,
        arm_pairs.run_a,
        arm_pairs.run_b,
        run_contrasts.delta,
        run_contrasts.ci_low,
        run_contrasts.ci_high,
        'stratified bootstrap' as ci_method,
        run_improvements.prob_improvement,
        run_contrasts.matched_reward_a,
        run_contrasts.matched_reward_b
    from arm_pairs
    left join run_contrasts using (ablation, run_a, run_b)
    left join run_improvements using (ablation, run_a, run_b)
    where arm_pairs.unit = 'runs'
),

final as (
    select
        contrasts.ablation,
        contrasts.run_a,
        contrasts.run_b,
        contrasts.delta,
        contrasts.ci_low,
        contrasts.ci_high,
        contrasts.ci_method,
        arm_pairs.unit,
        -- a NaN bound (rewards whose spread overflows) excludes nothing: DuckDB orders NaN above every number
        coalesce(
            isfinite(contrasts.ci_low) and isfinite(contrasts.ci_high)
            and (contrasts.ci_low > 0 or contrasts.ci_high < 0),
            false
        ) as resolved,
        contrasts.prob_improvement,
        arm_pairs.matched_horizon,
        contrasts.matched_reward_a,
        contrasts.matched_reward_b,
        contrasts.n_window_epochs_a,
        contrasts.n_window_epochs_b,
        arm_pairs.arm_a,
        arm_pairs.arm_b,
        arm_pairs.n_runs_a,
        arm_pairs.n_runs_b,
        getvariable('bootstrap_reps') as bootstrap_reps
    from contrasts
    inner join arm_pairs using (ablation, run_a, run_b)
)

select * from final
order by ablation, run_a, run_b
