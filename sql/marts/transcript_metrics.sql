-- One row per run × epoch with transcripts: how long its transcripts are (characters of content, messages, turns)
-- and how many tool calls they make, over all of them and over the top and bottom third of the epoch by reward. The
-- thirds rank the epoch's transcripts of a finite reward by reward, ties by position in the epoch (traj_index):
-- ntile(3), so the top third is the first ceil(n/3) of them.
with transcripts as (
    select
        run_id,
        epoch,
        traj_index,
        content_chars,
        n_messages,
        n_turns,
        n_tool_calls
    from trajectory_transcripts
    where transcript_path is not null
),

trajectories as (
    select
        run_id,
        epoch,
        traj_index,
        reward
    from fact_trajectories
),

ranked as (
    select
        transcripts.*,
        trajectories.reward,
        ntile(3) over (
            partition by transcripts.run_id, transcripts.epoch
            order by trajectories.reward desc, transcripts.traj_index asc
        ) as reward_third
    from transcripts
    inner join trajectories using (run_id, epoch, traj_index)
    where isfinite(trajectories.reward)
),

overall as (
    select
        run_id,
        epoch,
        count(*) as n_transcripts,
        avg(content_chars) as mean_content_chars,
        avg(n_messages) as mean_messages,
        avg(n_turns) as mean_turns,
        avg(n_tool_calls) as mean_tool_calls
    from transcripts
    group by run_id, epoch
),

-- The thirds' rewards averaged in position order: the same bits whatever the threads (avg of integers is exact).
thirds as (
    select
        run_id,
        epoch,
        count(*) filter (where reward_third = 1) as top_n,
        list_avg(list(reward order by traj_index) filter (where reward_third = 1)) as top_mean_reward,
        avg(content_chars) filter (where reward_third = 1) as top_mean_content_chars,
        avg(n_turns) filter (where reward_third = 1) as top_mean_turns,
        avg(n_tool_calls) filter (where reward_third = 1) as top_mean_tool_calls,
        count(*) filter (where reward_third = 3) as bottom_n,
        list_avg(list(reward order by traj_index) filter (where reward_third = 3)) as bottom_mean_reward,
        avg(content_chars) filter (where reward_third = 3) as bottom_mean_content_chars,
        avg(n_turns) filter (where reward_third = 3) as bottom_mean_turns,
        avg(n_tool_calls) filter (where reward_third = 3) as bottom_mean_tool_calls
    from ranked
    group by run_id, epoch
),

final as (
    select
        overall.*,
        coalesce(thirds.top_n, 0) as top_n,
        thirds.top_mean_reward,
        thirds.top_mean_content_chars,
        thirds.top_mean_turns,
        thirds.top_mean_tool_calls,
        coalesce(thirds.bottom_n, 0) as bottom_n,
        thirds.bottom_mean_reward,
        thirds.bottom_mean_content_chars,
        thirds.bottom_mean_turns,
        thirds.bottom_mean_tool_calls
    from overall
    left join thirds using (run_id, epoch)
)

select * from final
order by run_id, epoch
