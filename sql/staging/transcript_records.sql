-- One row per transcript record found in a run's files (lake.transcripts), with how many records of the run carry
-- its trajectory id, its rank among them (by path, then position), whether that id is a trajectory of its run and
-- how many of the run's trajectories carry it (a link needs exactly one).
with records as (
    select * from lake.transcripts
),

trajectory_ids as (
    select
        run_id,
        trajectory_id,
        count(*) as n_places
    from fact_trajectories
    group by run_id, trajectory_id
),

final as (
    select
        records.* replace (cast(cast(records.messages_by_role as json) as map (varchar, bigint)) as messages_by_role),
        row_number() over (
            partition by records.run_id, records.trajectory_id order by records.source_path, records.byte_offset
        ) as copy_rank,
        count(*) over (partition by records.run_id, records.trajectory_id) as n_copies,
        trajectory_ids.trajectory_id is not null as linked,
        coalesce(trajectory_ids.n_places, 0) as n_places
    from records
    left join trajectory_ids
        on records.run_id = trajectory_ids.run_id
        and records.trajectory_id = trajectory_ids.trajectory_id
)

select * from final
