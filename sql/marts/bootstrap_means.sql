-- One row per run × bootstrap replicate (1 … getvariable('bootstrap_reps')): the mean of a resample, with
-- replacement, of the run's matched-window values (matched_window_values), as many draws as there are values.
-- Draw i of replicate r picks the value at position md5(getvariable('bootstrap_seed'), run, r, i) mod n, not
-- random(), so a rebuild gives the same numbers at any thread count. ablation_contrasts takes its intervals from
-- the differences of two runs' means, replicate by replicate, when getvariable('ci_method') is `iid`; with
-- any other method the table is empty.
with window_values as (
    select
        run_id,
        position,
        mean_reward,
        n_values
    from matched_window_values
),

replicates as (
    select generate_series as replicate
    from generate_series(1, getvariable('bootstrap_reps'))
    -- only the `iid` method reads these means
    where getvariable('ci_method') = 'iid'
),

sizes as (
    select distinct
        run_id,
        n_values
    from window_values
),

draws as (
    select
        sizes.run_id,
        replicates.replicate,
        draw.i as draw_index,
        -- the low 64 bits, in unsigned integer arithmetic (a 128-bit modulo goes through DOUBLE and loses them)
        (
            md5_number_lower(concat_ws(':', getvariable('bootstrap_seed'), sizes.run_id, replicates.replicate, draw.i))
            % sizes.n_values::ubigint
        )::bigint as position
    from sizes
    cross join replicates
    -- a lateral subquery, which reads the row beside it, cannot be a CTE
    cross join lateral (select unnest(range(sizes.n_values)) as i) as draw  -- noqa: ST05
),

final as (
    select
        draws.run_id,
        draws.replicate,
        -- ordered, so the summation order (and the last bits) cannot depend on threads
        avg(window_values.mean_reward order by draws.draw_index) as resampled_mean
    from draws
    inner join window_values using (run_id, position)
    group by draws.run_id, draws.replicate
)

select * from final
order by run_id, replicate
