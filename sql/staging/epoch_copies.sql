-- Every loaded epoch document of the lake, ranked among the documents of the same run and epoch.
-- Two documents can hold one epoch (both layouts side by side, or a restarted job's copy): the most
-- recently written file ranks first, ties broken by path, so a rebuild always keeps the same one.
with epochs as (
    select * from lake.epochs
),

runs as (
    select run_id from lake.runs
),

final as (
    select
        epochs.*,
        row_number() over (
            partition by epochs.run_id, epochs.epoch
            order by epochs.source_mtime desc, epochs.source_path asc
        ) as copy_rank,
        count(*) over (partition by epochs.run_id, epochs.epoch) as n_copies
    from epochs
    where epochs.run_id in (select runs.run_id from runs)
)

select * from final
