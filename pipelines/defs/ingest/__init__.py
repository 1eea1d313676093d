"""Release files into the Parquet lake."""
