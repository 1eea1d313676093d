"""Atomic, change-only file writes: an export is replaced only when its bytes would differ."""

from __future__ import annotations

import io
import os
from pathlib import Path

import polars as pl


def write_if_changed(path: Path, content: bytes) -> bool:
    """Writes content to path by temp file + os.replace unless the file already holds these bytes; True if written."""
    path = Path(path)
    if path.is_file() and path.stat().st_size == len(content) and path.read_bytes() == content:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return True


def table_files(frame: pl.DataFrame) -> dict[str, bytes]:
    """A table as CSV and Parquet bytes, keyed by file extension; the same frame always gives the same bytes."""
    parquet = io.BytesIO()
    frame.write_parquet(parquet)
    return {"csv": frame.write_csv().encode(), "parquet": parquet.getvalue()}
