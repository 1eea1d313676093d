"""A release of many short runs in one ablation (`python -m benchmarks.many_runs OUT --runs 3000 --epochs 1`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import zlib
from pathlib import Path

import numpy as np

from pipelines.release.sample_documents import RUN_SPECS, build_run_documents

RELEASE = "many_runs"


def run_id(index: int) -> str:
    """The index-th run's name: no seed suffix, so every run is its own arm of the one ablation."""
    return f"run_{index:05d}"


def write_many_runs(out: Path, runs: int, epochs: int = 1, seed: int = 0) -> Path:
    """Writes out/many_runs/run_NNNNN/epoch_NNN_results.json, `epochs` documents for each of `runs` runs, their rewards
    drawn as the sample's multi-target runs are (the specs taken in turn); returns the release folder."""
    release = Path(out) / RELEASE
    for index in range(runs):
        name = run_id(index)
        spec = dataclasses.replace(RUN_SPECS[index % 4], run_id=name, release=RELEASE, last_epoch=epochs - 1)
        folder = release / name
        folder.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        for document in build_run_documents(spec, rng):
            path = folder / f"epoch_{document['epoch']:03d}_results.json"
            path.write_bytes(json.dumps(document).encode())
    return release


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.many_runs", description=__doc__)
    parser.add_argument("out", type=Path, help="the folder to write the release folder into")
    parser.add_argument("--runs", type=int, default=3000)
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args(argv)
    print(write_many_runs(args.out, args.runs, args.epochs))


if __name__ == "__main__":
    main()
