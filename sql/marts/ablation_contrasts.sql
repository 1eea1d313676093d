-- One row per pair of arms an ablation compares (contrast_pairs: every pair when it has at most
-- getvariable('pairwise_arms') arms, else every arm against its baseline or best arm; an arm is the configuration a
-- run is a seed of, dim_runs.arm, the run itself by default): the difference delta of arm_b's and arm_a's matched
-- rewards and its getvariable('ci_level') interval, computed by pipelines/stats/intervals (registered on the
-- connection by pipelines/stats/sql_functions.py). resolved: the interval excludes zero; resolved_holm: the same
-- claim adjusted by Holm's method for the ablation's claims (p_value is each interval's own); both are null, with
-- resolved_reason saying why, where the method cannot back a claim (too few epochs) or there is no interval.
-- Arms of one run each (unit `epochs of one run`): run_a < run_b are the runs, delta = matched_reward(run_b) −
-- matched_reward(run_a), and the interval (pair_interval, by getvariable('ci_method')) is for the difference of the
-- two runs' expected window means: a claim about these runs, not their configurations. seeds_needed: the seeds an
-- arm a configuration-level claim of this size would need (a two-sample t test at 80% power), from the between-seed
-- spread of the ablation's arms of several runs where it has some, else from the two runs' own variances (then a
-- lower bound). prob_improvement: the share of (epoch of run_b, epoch of run_a) pairs of the two matched windows
-- where run_b's mean reward is higher, ties counting one half (descriptive: epochs are not independent).
-- Arms of several runs (unit `runs`): run_a < run_b are the arm names, delta = mean(arm_b) − mean(arm_a) of the
-- runs' matched rewards, and the interval (arm_interval, ci_method `t over runs`) is Student's t on the runs'
-- values: a claim about the configurations' mean over seeds. An arm of one run against an arm of several has no
-- interval: one run shows nothing of its configuration's spread. prob_improvement is the share of (run of arm_b,
-- run of arm_a) pairs where arm_b's run is higher.
with summaries as (
    select
        run_id,
        ablation,
        matched_horizon,
        matched_reward,
        matched_std_error
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

series as (
    select
        run_id,
        epochs,
        mean_rewards,
        noise_variances
    from matched_series
),

-- each run's arm (a run missing from dim_runs is its own)
members as (
    select
        summaries.*,
        coalesce(runs.arm, summaries.run_id) as arm
    from summaries
    left join runs using (run_id)
),

-- the pairs of arms compared, in the one place that decides them
arm_pairs as (
    select
        ablation,
        arm_a,
        arm_b,
        run_a,
        run_b,
        n_runs_a,
        n_runs_b,
        matched_horizon,
        unit,
        pairing
    from contrast_pairs
),

-- arms of one run each: the two runs' interval, computed once per pair by pipelines/stats/intervals.pair_interval
-- from both runs' series up to the horizon
run_pairs as materialized (
    select
        arm_pairs.*,
        run_b.matched_reward - run_a.matched_reward as delta,
        run_a.matched_reward as matched_reward_a,
        run_b.matched_reward as matched_reward_b,
        (run_a.matched_std_error ^ 2 + run_b.matched_std_error ^ 2) / 2 as run_variance,
        pair_interval(
            series_a.epochs,
            series_a.mean_rewards,
            series_a.noise_variances,
            series_b.epochs,
            series_b.mean_rewards,
            series_b.noise_variances,
            getvariable('final_window'),
            getvariable('ci_method'),
            getvariable('ci_level'),
            getvariable('ci_fit_epochs')
        ) as fit
    from arm_pairs
    inner join members as run_a on arm_pairs.ablation = run_a.ablation and arm_pairs.arm_a = run_a.arm
    inner join members as run_b on arm_pairs.ablation = run_b.ablation and arm_pairs.arm_b = run_b.arm
    inner join series as series_a on run_a.run_id = series_a.run_id
    inner join series as series_b on run_b.run_id = series_b.run_id
    where arm_pairs.unit = 'epochs of one run'
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

-- the between-seed variance of the ablation's arms of several runs, pooled: what a configuration-level claim's seeds
-- would vary by
seed_spreads as (
    select
        ablation,
        sum((n_runs - 1) * run_variance) / sum(n_runs - 1) as seed_variance
    from (
        select
            ablation,
            arm,
            count(*) as n_runs,
            var_samp(matched_reward) as run_variance
        from members
        where isfinite(matched_reward)
        group by ablation, arm
        having count(*) >= 2
    ) as arms_of_seeds
    group by ablation
),

epoch_contrasts as (
    select
        run_pairs.ablation,
        run_pairs.run_a,
        run_pairs.run_b,
        run_pairs.delta,
        run_pairs.fit,
        getvariable('ci_method') as ci_method,
        epoch_improvements.prob_improvement,
        run_pairs.matched_reward_a,
        run_pairs.matched_reward_b,
        epoch_improvements.n_window_epochs_a,
        epoch_improvements.n_window_epochs_b,
        -- seeds an arm for a claim about the configurations of this size: from the between-seed spread where the
        -- ablation has arms of seeds, else from the runs' own variances (a lower bound: seeds vary at least as much)
        seeds_per_arm(
            run_pairs.delta,
            coalesce(seed_spreads.seed_variance, run_pairs.run_variance),
            getvariable('ci_level')
        ) as seeds_needed
    from run_pairs
    left join epoch_improvements using (run_a, run_b)
    left join seed_spreads using (ablation)
),

-- arms of several runs: each arm's runs' matched rewards, compared by pipelines/stats/intervals.arm_interval
arm_rewards as (
    select
        ablation,
        arm,
        list(matched_reward order by run_id) as matched_rewards,
        avg(matched_reward order by run_id) filter (where isfinite(matched_reward)) as mean_reward
    from members
    group by ablation, arm
),

arm_contrasts as materialized (
    select
        arm_pairs.ablation,
        arm_pairs.run_a,
        arm_pairs.run_b,
        rewards_a.mean_reward as matched_reward_a,
        rewards_b.mean_reward as matched_reward_b,
        arm_interval(rewards_a.matched_rewards, rewards_b.matched_rewards, getvariable('ci_level')) as fit
    from arm_pairs
    inner join arm_rewards as rewards_a on arm_pairs.ablation = rewards_a.ablation and arm_pairs.arm_a = rewards_a.arm
    inner join arm_rewards as rewards_b on arm_pairs.ablation = rewards_b.ablation and arm_pairs.arm_b = rewards_b.arm
    where arm_pairs.unit = 'runs'
),

run_improvements as (
    select
        arm_pairs.ablation,
        arm_pairs.run_a,
        arm_pairs.run_b,
        avg(mann_whitney_score(value_b.matched_reward, value_a.matched_reward)) as prob_improvement
    from arm_pairs
    inner join members as value_a on arm_pairs.ablation = value_a.ablation and arm_pairs.arm_a = value_a.arm
    inner join members as value_b on arm_pairs.ablation = value_b.ablation and arm_pairs.arm_b = value_b.arm
    where arm_pairs.unit = 'runs' and isfinite(value_a.matched_reward) and isfinite(value_b.matched_reward)
    group by arm_pairs.ablation, arm_pairs.run_a, arm_pairs.run_b
),

contrasts as (
    select * from epoch_contrasts
    union all by name
    select
        arm_contrasts.ablation,
        arm_contrasts.run_a,
        arm_contrasts.run_b,
        arm_contrasts.fit.delta,
        arm_contrasts.fit,
        't over runs' as ci_method,
        run_improvements.prob_improvement,
        arm_contrasts.matched_reward_a,
        arm_contrasts.matched_reward_b
    from arm_contrasts
    left join run_improvements using (ablation, run_a, run_b)
),

-- a claim is made where the method backs one and there is an interval
claims as (
    select
        *,
        if(fit['claimable'] and fit['ci_low'] is not null and fit['ci_high'] is not null, fit['p_value'], null)
            as claim_p_value
    from contrasts
),

-- Holm's step-down adjustment over an ablation's claims in order of their p-values: the i-th smallest of m is
-- resolved when, for every j up to i, the j-th smallest times m − j + 1 is below 1 − ci_level
ranked_claims as (
    select
        *,
        row_number() over (partition by ablation order by claim_p_value nulls last, run_a, run_b) as claim_rank,
        count(claim_p_value) over (partition by ablation) as n_claims
    from claims
),

adjusted as (
    select
        *,
        if(
            claim_p_value is null,
            null,
            max(least(1, (n_claims - claim_rank + 1) * claim_p_value)) over (
                partition by ablation order by claim_rank rows between unbounded preceding and current row
            )
        ) as holm_p_value
    from ranked_claims
),

final as (
    select
        adjusted.ablation,
        adjusted.run_a,
        adjusted.run_b,
        adjusted.delta,
        adjusted.fit.ci_low,
        adjusted.fit.ci_high,
        adjusted.ci_method,
        arm_pairs.unit,
        if(adjusted.claim_p_value is null, null, adjusted.fit.ci_low > 0 or adjusted.fit.ci_high < 0) as resolved,
        adjusted.prob_improvement,
        arm_pairs.matched_horizon,
        adjusted.matched_reward_a,
        adjusted.matched_reward_b,
        adjusted.n_window_epochs_a,
        adjusted.n_window_epochs_b,
        arm_pairs.arm_a,
        arm_pairs.arm_b,
        arm_pairs.n_runs_a,
        arm_pairs.n_runs_b,
        adjusted.fit.p_value,
        if(adjusted.claim_p_value is null, null, adjusted.holm_p_value < 1 - getvariable('ci_level')) as resolved_holm,
        case
            when adjusted.claim_p_value is not null then null
            when adjusted.fit.reason is not null then adjusted.fit.reason
            else 'no interval: neither window varies, so there is no spread to estimate one from'
        end as resolved_reason,
        adjusted.seeds_needed,
        arm_pairs.pairing
    from adjusted
    inner join arm_pairs using (ablation, run_a, run_b)
)

select * from final
order by ablation, run_a, run_b
