-- One row per trajectory: where its transcript is (the file, its line or byte span, the format) and what any
-- transcript shape gives (messages by role, turns, tool calls, characters of content), then the record's scalar
-- fields as columns; all null for a trajectory without a transcript. Of two transcripts of one trajectory, the first
-- by path and position is linked; an id that several trajectories of the run carry links none of them (ingest_errors
-- says both).
with trajectories as (
    select
        run_id,
        epoch,
        traj_index,
        trajectory_id
    from fact_trajectories
),

records as (
    select * from transcript_records
    where copy_rank = 1 and n_places = 1
),

final as (
    select
        trajectories.run_id,
        trajectories.epoch,
        trajectories.traj_index,
        trajectories.trajectory_id,
        records.source_path as transcript_path,
        records.format as transcript_format,
        records.line,
        records.byte_offset,
        records.byte_length,
        records.id_source,
        records.n_messages,
        records.messages_by_role,
        records.n_turns,
        records.n_tool_calls,
        records.content_chars,
        records.n_copies as n_transcripts,
        records.text,
        -- the record's fields; the names in `exclude` are the star's columns, not references (sqlfluff reads them
        -- as such)
        -- noqa: disable=RF02
        records.* exclude (
            run_id, trajectory_id, source_path, format, line, byte_offset, byte_length, id_source, n_messages,
            messages_by_role, n_turns, n_tool_calls, content_chars, text, copy_rank, n_copies, linked, n_places
        )
        -- noqa: enable=RF02
    from trajectories
    left join records
        on trajectories.run_id = records.run_id
        and trajectories.trajectory_id = records.trajectory_id
)

select * from final
