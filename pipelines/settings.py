"""Names the command line and the code location share: environment variables, defaults, the published file's path.

Nothing heavier than the standard library is imported here, so `grpo-warehouse sql` starts without Dagster or polars.
"""

from __future__ import annotations

from pathlib import Path

ENV_RELEASES = "GRPO_RELEASES"
ENV_WAREHOUSE = "GRPO_WAREHOUSE_DIR"
ENV_REGISTRY = "GRPO_REGISTRY"
ENV_WORKERS = "GRPO_WORKERS"
DEFAULT_WAREHOUSE = "warehouse"
PUBLISHED_NAME = "warehouse.duckdb"


def published_path(warehouse: Path) -> Path:
    """The DuckDB file readers open, inside a warehouse folder."""
    return Path(warehouse) / PUBLISHED_NAME
