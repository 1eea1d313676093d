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

transcripts as (
    select
        run_id,
        source_path,
        trajectory_id,
        coalesce('line ' || line, 'byte ' || byte_offset) as place,
        byte_offset,
        copy_rank,
        linked,
        n_places
    from transcript_records
),

-- A file's records whose trajectory id is no trajectory of their run: one row per file, naming the first.
unlinked_transcripts as (
    select
        run_id,
        source_path,
        null::bigint as epoch,
        'transcript_unmatched' as error_kind,
        'warning' as severity,
        count(*) || ' record(s) whose trajectory id is no trajectory of run ' || run_id || ', the first '
        || arg_min(trajectory_id, byte_offset) || ' at ' || arg_min(place, byte_offset) as message,
        'indexed: linked to no trajectory' as action
    from transcripts
    where not linked
    group by run_id, source_path
),

-- A file's records whose trajectory id several trajectories of their run carry (ids reused across epochs, say):
-- which one a record belongs to is unknown, so none is linked.
ambiguous_transcripts as (
    select
        run_id,
        source_path,
        null::bigint as epoch,
        'transcript_ambiguous' as error_kind,
        'warning' as severity,
        count(*) || ' record(s) whose trajectory id several trajectories of run ' || run_id || ' carry, the first '
        || arg_min(trajectory_id, byte_offset) || ' at ' || arg_min(place, byte_offset) || ' (carried by '
        || arg_min(n_places, byte_offset) || ')' as message,
        'indexed: linked to no trajectory' as action
    from transcripts
    where n_places > 1
    group by run_id, source_path
),

-- A file's records of trajectories whose transcript is linked from an earlier record (by path, then position).
duplicate_transcripts as (
    select
        copies.run_id,
        copies.source_path,
        null::bigint as epoch,
        'duplicate_transcript' as error_kind,
        'warning' as severity,
        count(*) || ' record(s) of trajectories that already have a transcript, the first '
        || arg_min(copies.trajectory_id, copies.byte_offset) || ' at ' || arg_min(copies.place, copies.byte_offset)
        || ', whose transcript is ' || arg_min(kept.source_path || ' ' || kept.place, copies.byte_offset) as message,
        'not linked: duplicate' as action
    from transcripts as copies
    inner join transcripts as kept
        on copies.run_id = kept.run_id and copies.trajectory_id = kept.trajectory_id and kept.copy_rank = 1
    where copies.copy_rank > 1 and copies.n_places = 1
    group by copies.run_id, copies.source_path
),

unioned as (
    select * from file_problems
    union all by name
    select * from release_problems
    union all by name
    select * from duplicate_documents
    union all by name
    select * from value_problems
    union all by name
    select * from unlinked_transcripts
    union all by name
    select * from ambiguous_transcripts
    union all by name
    select * from duplicate_transcripts
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
