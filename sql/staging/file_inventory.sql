-- One row per file or entry found in the releases: loaded, quarantined, duplicate or skipped, with the reason.
with run_files as (
    select * from lake.files
),

release_entries as (
    select * from lake.release_files
),

duplicates as (
    select
        run_id,
        source_path
    from epoch_copies
    where copy_rank > 1
),

unioned as (
    select * from run_files
    union all by name
    select * from release_entries
),

final as (
    select
        unioned.run_id,
        unioned.source_path,
        unioned.layout,
        unioned.epoch_in_name,
        unioned.size_bytes,
        unioned.mtime,
        case when duplicates.source_path is not null then 'duplicate' else unioned.status end as status,
        unioned.reason
    from unioned
    left join duplicates using (run_id, source_path)
)

select * from final
order by run_id nulls first, source_path
