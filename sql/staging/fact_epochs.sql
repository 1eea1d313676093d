-- One row per run × epoch: the epoch summaries of every release, scalar extra keys as columns.
with copies as (
    select * from epoch_copies
),

final as (
    select * exclude (copy_rank, n_copies)
    from copies
    where copy_rank = 1
)

select * from final
order by run_id, epoch
