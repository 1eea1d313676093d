"""grpo-warehouse: an analytical warehouse for GRPO training runs."""
