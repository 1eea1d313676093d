-- One row per run × epoch × trajectory, with its group (traj_index // group_size) and per-trajectory extras.
with trajectories as (
    select * from lake.trajectories
),

kept_documents as (
    select
        run_id,
        epoch,
        source_path
    from fact_epochs
),

runs as (
    select
        run_id,
        group_size
    from dim_runs
),

final as (
    select
        trajectories.run_id,
        trajectories.epoch,
        trajectories.traj_index,
        trajectories.traj_index // runs.group_size as group_index,
        trajectories.trajectory_id,
        trajectories.reward,
        trajectories.advantage,
        -- the names in `exclude` are the star's columns, not references (sqlfluff reads them as such)
        trajectories.* exclude (run_id, epoch, traj_index, trajectory_id, reward, advantage)  -- noqa: RF02
    from trajectories
    inner join kept_documents using (run_id, epoch, source_path)
    inner join runs using (run_id)
)

-- Not sorted: the rows come in the lake's order, a run's file after another, each in epoch and trajectory order,
-- and every model reading them orders what it aggregates. A sort of the largest table would cost more CPU than
-- the rest of this model together (1.0 s against 1.5 s on the 10x sample).
select * from final
