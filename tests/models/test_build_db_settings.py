"""The build database's DuckDB settings: a memory limit from the configuration, and a spill folder under .build."""

from pipelines.defs.resources import WarehouseConfig
from pipelines.settings import ENV_MEMORY_LIMIT
from pipelines.warehouse_db import open_build_db


def settings(warehouse, **kwargs) -> tuple[str, str]:
    with open_build_db(warehouse, **kwargs) as con:
        return con.execute("select current_setting('memory_limit'), current_setting('temp_directory')").fetchone()


def test_the_memory_limit_comes_from_the_configuration_and_spills_go_under_build(tmp_path):
    # DuckDB reports 1000 * 2**20 bytes ("1000MB") in binary units
    assert settings(tmp_path, memory_limit="1000MB") == ("953.6 MiB", str(tmp_path / ".build" / "tmp"))
    assert settings(tmp_path)[0] == "488.2 MiB"  # the default, 512MB
    config = WarehouseConfig.from_env({ENV_MEMORY_LIMIT: "500MB"})
    assert settings(tmp_path, read_only=True, memory_limit=config.duckdb_memory_limit)[0] == "476.8 MiB"
