"""Plain Python over published releases: discover, decode, flatten, sample. Knows nothing of Dagster."""
