-- One row per epoch entry of a run (an epoch_NNN_results.json file or an epoch_NNN/ folder) that loaded no
-- epoch: the reason (the error_kind of its first problem in ingest_errors) and the path to look at.
with inventory as (
    select * from file_inventory
),

problems as (
    select * from ingest_errors
),

epochs as (
    select * from fact_epochs
),

runs as (
    select run_id from dim_runs
),

entries as (
    select
        run_id,
        epoch_in_name as epoch,
        min(source_path) as first_path
    from inventory
    where epoch_in_name is not null
        and run_id in (select runs.run_id from runs)
    group by run_id, epoch_in_name
),

not_loaded as (
    select entries.*
    from entries
    anti join epochs using (run_id, epoch)
),

ranked_problems as (
    select
        run_id,
        epoch,
        error_kind,
        source_path,
        message,
        row_number() over (partition by run_id, epoch order by source_path, error_kind) as problem_rank
    from problems
    where severity = 'error'
        and epoch is not null
),

final as (
    select
        not_loaded.run_id,
        not_loaded.epoch,
        coalesce(ranked_problems.error_kind, 'no_document') as reason,
        coalesce(ranked_problems.source_path, not_loaded.first_path) as source_path,
        coalesce(ranked_problems.message, 'no epoch document was loaded from this entry') as message
    from not_loaded
    left join ranked_problems
        on not_loaded.run_id = ranked_problems.run_id
        and not_loaded.epoch = ranked_problems.epoch
        and ranked_problems.problem_rank = 1
)

select * from final
order by run_id, epoch
