"""The ablation figures' files: each ablation's figure drawn and saved as PNG and SVG, in a pool of processes, a figure
that cannot be drawn reported without stopping the others."""

from __future__ import annotations

import io
import math
import multiprocessing
import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from pipelines.errors import failure_line
from pipelines.exports.figure_panels import FIGURE_DPI, ablation_figure, drawing
from pipelines.exports.figure_series import NEEDED_EPOCH_COLUMNS, Smoothing, ablation_inputs, run_colours

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "NEEDED_EPOCH_COLUMNS",
    "PAPER_FIGURE_NAMES",
    "Drawing",
    "FigureJob",
    "Smoothing",
    "ablation_figure",
    "ablation_inputs",
    "draw",
    "draw_figures",
    "figure_files",
    "file_stem",
    "render",
    "run_colours",
]

# The paper's file names for some ablations, written beside `<ablation>.png`.
PAPER_FIGURE_NAMES = {"multi_target": "cut_multi_target.png"}
# No date and no tool version in the files: the same figure, the same bytes (the SVG's ids are fixed by svg.hashsalt).
FILE_METADATA = {"svg": {"Date": None, "Creator": None}, "png": {"Software": None}}
PREVIEW_SCALE = 0.4  # the UI's preview: the PNG shrunk to 60 dpi
# A helper process costs about a second of CPU to start (matplotlib's and polars' imports): one is started per this
# many figures at most.
FIGURES_PER_PROCESS = 4


def file_stem(ablation: str | None) -> str:
    """A file-name-safe stem for an ablation name."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", ablation or "unassigned").strip("._")
    return stem or "unassigned"


def render(fig: Figure, fmt: str, dpi: int = FIGURE_DPI) -> bytes:
    """The figure as PNG or SVG bytes, by matplotlib's savefig (Agg, SVG); the same figure gives the same bytes."""
    buffer = io.BytesIO()
    with drawing():
        fig.savefig(buffer, format=fmt, dpi=dpi, facecolor="white", metadata=FILE_METADATA.get(fmt))
    return buffer.getvalue()


def figure_files(ablation: str | None, fig: Figure) -> dict[str, bytes]:
    """File name -> bytes for one ablation: `<ablation>.png`, `<ablation>.svg` and any paper name."""
    png = render(fig, "png")
    files = {f"{file_stem(ablation)}.png": png, f"{file_stem(ablation)}.svg": render(fig, "svg")}
    if ablation in PAPER_FIGURE_NAMES:
        files[PAPER_FIGURE_NAMES[ablation]] = png
    return files


def preview_jpeg(png: bytes) -> bytes:
    """A small JPEG of a figure for the UI, shrunk from its PNG by averaging each pixel's area (BOX)."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    size = (round(image.width * PREVIEW_SCALE), round(image.height * PREVIEW_SCALE))
    buffer = io.BytesIO()
    image.resize(size, Image.Resampling.BOX).save(buffer, format="jpeg", quality=80)
    return buffer.getvalue()


@dataclass(frozen=True)
class FigureJob:
    """One ablation's figure to draw: its rows (ablation_inputs), how to smooth, and whether the UI previews it."""

    ablation: str | None
    rows: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]
    smoothing: Smoothing
    final_window: int
    preview: bool


@dataclass(frozen=True)
class Drawing:
    """One ablation's figure files and UI preview, or, when it could not be drawn, why (one line) and no files."""

    files: dict[str, bytes]
    preview: bytes | None = None
    failure: str | None = None


def draw(job: FigureJob) -> Drawing:
    """The files of one ablation's figure (figure_files) and its preview JPEG if asked for, on a new figure."""
    try:
        fig = ablation_figure(job.ablation, *job.rows, job.smoothing, final_window=job.final_window)
        files = figure_files(job.ablation, fig)
        return Drawing(files, preview_jpeg(files[f"{file_stem(job.ablation)}.png"]) if job.preview else None)
    except Exception as error:  # one ablation's figure, whatever stops it, must not stop the build or the others
        return Drawing({}, failure=failure_line(error))


def draw_figures(jobs: list[FigureJob], workers: int = 0) -> list[Drawing]:
    """Draws the figures, in order: in up to `workers` processes (0: one per core), one per FIGURES_PER_PROCESS
    figures at most; in this process when that makes one.

    matplotlib draws on one core and the figures are independent, so processes are what use the others. spawn, not
    fork: the caller (a Dagster run) has threads, and polars' thread pool does not survive fork."""
    processes = min(workers or os.cpu_count() or 1, math.ceil(len(jobs) / FIGURES_PER_PROCESS))
    if processes <= 1:
        return [draw(job) for job in jobs]
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(draw, job) for job in jobs]
        return [_drawn(future) for future in futures]


def _drawn(future) -> Drawing:
    try:
        return future.result()
    except Exception as error:  # the process drawing it died (out of memory, killed): the figure is what failed
        return Drawing({}, failure=f"its drawing process failed: {failure_line(error)}")
