"""Which runs may leave the warehouse: those whose folder is gone from a release that still holds runs, never those of
a release that is missing, unreadable or empty (an unmounted disk, a typo), unless that release is named for removal."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

from pipelines.lake import gone_runs, read_manifest
from pipelines.release.discover import RunFolder, release_problem


class RemovalRefused(Exception):
    """A build that would remove runs by what looks like a mistake; the message names the release and the way out."""


def removal_refusal(
    release_roots: Iterable[Path], runs: Mapping[str, RunFolder], lake: Path, remove_releases: Collection[str] = ()
) -> str | None:
    """Why the runs the lake holds but no release shows may not be removed, or None when they may.

    A run is in the release its manifest names. Its removal is refused when that release shows no run at all now,
    either because its folder is missing, unreadable or empty, or because it is not among the releases given; a
    release named in remove_releases leaves whole.
    """
    gone = gone_runs(lake, runs)
    if not gone:
        return None
    showing = {run.release for run in runs.values()}
    roots = {Path(root).name: root for root in release_roots}
    by_release: dict[str, list[str]] = {}
    for run_id in gone:
        release = read_manifest(lake, run_id).get("release", "")
        if release not in showing and release not in remove_releases:
            by_release.setdefault(release, []).append(run_id)
    if not by_release:
        return None
    release, run_ids = sorted(by_release.items())[0]
    held = f"{len(run_ids)} run(s) of release {release!r} ({_listed(run_ids)})"
    way_out = f"to remove them, add --remove-release {release}"
    if release in roots:
        why = release_problem(roots[release]) or f"release folder {roots[release]} holds no run folder"
        return f"{why}: refusing to remove the warehouse's {held} (an unmounted disk? a typo?); {way_out}"
    return f"the warehouse holds {held}, and no release given is {release!r}: refusing to remove them; {way_out}"


def check_removals(
    release_roots: Iterable[Path], runs: Mapping[str, RunFolder], lake: Path, remove_releases: Collection[str] = ()
) -> None:
    """Raises RemovalRefused with removal_refusal's reason, if any."""
    if reason := removal_refusal(release_roots, runs, lake, remove_releases):
        raise RemovalRefused(reason)


def _listed(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
