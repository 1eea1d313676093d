-- One row per problem found in the input: the file (path relative to its release), what is wrong and where,
-- and what was done about it. A fixed file leaves it at the next build.
with file_problems as (
    select * from lake.errors
),

release_problems as (
    select * from lake.release_errors
),

duplicate_documents as (
    select
        copies.run_id,
        copies.source_path,
        copies.epoch,
        'duplicate_epoch' as error_kind,
        'warning' as severity,
        'epoch ' || copies.epoch || ' is also in ' || kept.source_path
        || '; the most recently written file is kept' as message,
        'not loaded: duplicate' as action
    from epoch_copies as copies
    inner join epoch_copies as kept
        on copies.run_id = kept.run_id and copies.epoch = kept.epoch and kept.copy_rank = 1
    where copies.copy_rank > 1
),

value_problems as (
    select * from value_warnings
),

unioned as (
    select * from file_problems
    union all by name
    select * from release_problems
    union all by name
    select * from duplicate_documents
    union all by name
    select * from value_problems
),

final as (
    select
        source_path,
        run_id,
        epoch,
        error_kind,
        message,
        severity,
        action
    from unioned
)

select * from final
order by run_id nulls first, source_path, error_kind
