"""Which runs may leave the warehouse: those whose folder is gone from a release that still holds runs, never those of
a release that is missing, unreadable or empty (an unmounted disk, a typo), nor those of a release whose name is now
given to another folder, unless that release is named for removal."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

from pipelines.lake.manifest import read_manifest
from pipelines.lake.paths import gone_runs
from pipelines.lake_store import real_location
from pipelines.release.discover import RunFolder
from pipelines.release.releases import release_problem


class RemovalRefused(Exception):
    """A build that would remove runs by what looks like a mistake; the message names the release and the way out."""


def removal_refusal(
    release_roots: Iterable[Path], runs: Mapping[str, RunFolder], lake: Path, remove_releases: Collection[str] = ()
) -> str | None:
    """Why the runs the lake holds but no release shows may not be removed, or None when they may.

    A run is in the release its manifest names; one with no manifest may always leave. Its removal is refused when
    that release shows no run at all now, either because its folder is missing, unreadable or empty, or because it
    is not among the releases given; or when the release's name now stands for another folder than the run came
    from, which none of the runs it shows came from either (a release moved whole keeps its runs' folder in their
    manifests). A release named in remove_releases leaves whole.
    """
    gone = [(run_id, read_manifest(lake, run_id)) for run_id in gone_runs(lake, runs)]
    # A run with no manifest was never ingested whole (its first ingest failed): the warehouse published none of it.
    gone = [(run_id, manifest) for run_id, manifest in gone if manifest]
    gone = [(run_id, manifest) for run_id, manifest in gone if manifest.get("release", "") not in remove_releases]
    if not gone:
        return None
    showing = {run.release for run in runs.values()}
    folders: dict[str, set[str]] = {}
    missing: dict[str, list[str]] = {}
    elsewhere: dict[tuple[str, str], list[str]] = {}
    for run_id, manifest in gone:
        release, came_from = manifest.get("release", ""), manifest.get("release_root")
        if release not in showing:
            missing.setdefault(release, []).append(run_id)
            continue
        if release not in folders:
            folders[release] = _folders_of(release, runs, lake)
        if came_from and came_from not in folders[release]:
            elsewhere.setdefault((release, came_from), []).append(run_id)
    if missing:
        return _missing_refusal(*sorted(missing.items())[0], release_roots)
    if elsewhere:
        (release, came_from), run_ids = sorted(elsewhere.items())[0]
        now = sorted({real_location(r.release_root) for r in runs.values() if r.release == release})
        held = _held(release, run_ids)
        return (
            f"release {release!r} is now read from {', '.join(now)}, but the warehouse's {held} came from "
            f"{came_from}: refusing to remove them (another folder of the same name?); "
            f"to remove them, add --remove-release {release}"
        )
    return None


def _folders_of(release: str, runs: Mapping[str, RunFolder], lake: Path) -> set[str]:
    """The folders a release's runs are read from now, and those they were read from when the lake took them."""
    mine = [run for run in runs.values() if run.release == release]
    return {real_location(run.release_root) for run in mine} | {
        read_manifest(lake, run.run_id).get("release_root") for run in mine
    }


def _missing_refusal(release: str, run_ids: list[str], release_roots: Iterable[Path]) -> str:
    roots = {Path(root).name: root for root in release_roots}
    held, way_out = _held(release, run_ids), f"to remove them, add --remove-release {release}"
    if release in roots:
        why = release_problem(roots[release]) or f"release folder {roots[release]} holds no run folder"
        return f"{why}: refusing to remove the warehouse's {held} (an unmounted disk? a typo?); {way_out}"
    return f"the warehouse holds {held}, and no release given is {release!r}: refusing to remove them; {way_out}"


def _held(release: str, run_ids: list[str]) -> str:
    return f"{len(run_ids)} run(s) of release {release!r} ({_listed(run_ids)})"


def check_removals(
    release_roots: Iterable[Path], runs: Mapping[str, RunFolder], lake: Path, remove_releases: Collection[str] = ()
) -> None:
    """Raises RemovalRefused with removal_refusal's reason, if any."""
    if reason := removal_refusal(release_roots, runs, lake, remove_releases):
        raise RemovalRefused(reason)


def _listed(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
