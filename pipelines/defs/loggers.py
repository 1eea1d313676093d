"""Loggers: Dagster's console logger for the UI's runs, and short lines for `grpo-warehouse build` in a terminal."""

import logging
import sys

import dagster as dg


class _StepLineFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        meta = getattr(record, "dagster_meta", None) or {}
        step = meta.get("step_key") or ""
        message = meta.get("orig_message") or record.getMessage()
        level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        return f"  {step:<24} {level}{message}"


@dg.logger(
    config_schema={"log_level": dg.Field(str, is_required=False, default_value="INFO")},
    description="One short line per message, prefixed with its step, for a terminal.",
)
def terminal_logger(init_context: dg.InitLoggerContext) -> logging.Logger:
    logger = logging.Logger("grpo_warehouse", level=init_context.logger_config["log_level"])
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(_StepLineFormatter())
    logger.addHandler(handler)
    return logger


@dg.definitions
def loggers() -> dg.Definitions:
    return dg.Definitions(loggers={"console": dg.colored_console_logger, "terminal": terminal_logger})
