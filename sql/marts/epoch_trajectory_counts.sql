-- One row per run × epoch of fact_trajectories: its trajectory rows, their distinct positions (traj_index), and
-- the first and last position. The check trajectory_arrays_consistent compares them with fact_epochs'
-- n_trajectories: positions 0 … n − 1, each once. Computed per run, so after a change only that run's epochs are
-- counted again (a distinct count per epoch over every trajectory is the costly part of the check).
with trajectories as (
    select
        run_id,
        epoch,
        traj_index
    from fact_trajectories
),

final as (
    select
        run_id,
        epoch,
        count(*) as n_rows,
        -- the distinct values of a list per epoch: a `count(distinct)` hashes every (run, epoch, position) at once
        list_unique(list(traj_index))::bigint as n_positions,
        min(traj_index) as first_index,
        max(traj_index) as last_index
    from trajectories
    group by run_id, epoch
)

select * from final
order by run_id, epoch
