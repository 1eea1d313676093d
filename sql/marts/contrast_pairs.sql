-- One row per pair of arms an ablation compares in ablation_contrasts (an arm is the configuration a run is a seed of:
-- dim_runs.arm, the run itself by default). An ablation of at most getvariable('pairwise_arms') arms compares every
-- pair; a larger one compares every other arm with its reference arm alone, so that its contrasts grow with its arms,
-- not with their square. The reference is the arm the registry marks as the ablation's baseline (dim_runs.baseline;
-- the first by name if it marks several), else the best arm: the highest mean of its runs' finite matched rewards
-- (ties: the first by name). An ablation of more arms with neither has no contrast.
-- A single run's arm is named by its run id in run_a/run_b, an arm of several runs by its name; run_a < run_b.
with summaries as (
    select
        run_id,
        ablation,
        matched_horizon,
        matched_reward
    from run_summary
),

runs as (
    select
        run_id,
        arm,
        baseline
    from dim_runs
),

-- each run's arm (a run missing from dim_runs is its own)
members as (
    select
        summaries.*,
        coalesce(runs.arm, summaries.run_id) as arm,
        coalesce(runs.baseline, false) as baseline
    from summaries
    left join runs using (run_id)
),

arms as (
    select
        ablation,
        arm,
        if(count(*) = 1, any_value(run_id), arm) as arm_name,
        count(*) as arm_runs,
        min(matched_horizon) as matched_horizon,
        avg(matched_reward) filter (where isfinite(matched_reward)) as mean_reward,
        bool_or(baseline) as baseline,
        count(*) over (partition by ablation) as n_arms
    from members
    group by ablation, arm
),

-- the arm every other is compared with in an ablation of more than pairwise_arms arms
reference_arms as (
    select
        ablation,
        first(arm order by baseline desc, mean_reward desc nulls last, arm_name asc) as arm,
        if(bool_or(baseline), 'against the baseline', 'against the best arm') as pairing
    from arms
    where n_arms > getvariable('pairwise_arms') and (baseline or mean_reward is not null)
    group by ablation
),

few_arms as (
    select * from arms
    where n_arms <= getvariable('pairwise_arms')
),

every_pair as (
    select
        arm_a.ablation,
        arm_a.arm as arm_1,
        arm_b.arm as arm_2,
        'every pair' as pairing
    from few_arms as arm_a
    inner join few_arms as arm_b
        on arm_a.ablation = arm_b.ablation and arm_a.arm_name < arm_b.arm_name
),

against_reference as (
    select
        others.ablation,
        reference_arms.arm as arm_1,
        others.arm as arm_2,
        reference_arms.pairing
    from arms as others
    inner join reference_arms
        on others.ablation = reference_arms.ablation and others.arm != reference_arms.arm
),

pairs as (
    select * from every_pair
    union all
    select * from against_reference
),

-- each pair in name order: run_a is the arm whose name comes first
final as (
    select
        pairs.ablation,
        if(one.arm_name < two.arm_name, one.arm, two.arm) as arm_a,
        if(one.arm_name < two.arm_name, two.arm, one.arm) as arm_b,
        least(one.arm_name, two.arm_name) as run_a,
        greatest(one.arm_name, two.arm_name) as run_b,
        if(one.arm_name < two.arm_name, one.arm_runs, two.arm_runs) as n_runs_a,
        if(one.arm_name < two.arm_name, two.arm_runs, one.arm_runs) as n_runs_b,
        least(one.matched_horizon, two.matched_horizon) as matched_horizon,
        if(one.arm_runs = 1 and two.arm_runs = 1, 'epochs of one run', 'runs') as unit,
        pairs.pairing
    from pairs
    inner join arms as one on pairs.ablation = one.ablation and pairs.arm_1 = one.arm
    inner join arms as two on pairs.ablation = two.ablation and pairs.arm_2 = two.arm
)

select * from final
order by ablation, run_a, run_b
