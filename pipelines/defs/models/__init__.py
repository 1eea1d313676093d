"""SQL models in sql/, each a DuckDB table and a Dagster asset."""
