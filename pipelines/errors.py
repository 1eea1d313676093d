"""An error as the one line a build reports it in: a figure that was not drawn, a model that failed."""

FAILURE_CHARACTERS = 300  # a failure's cause is one line, cut at this length


def failure_line(error: BaseException) -> str:
    """An error as one line: its type and the first line of its message."""
    message = str(error).strip().splitlines()
    line = f"{type(error).__name__}: {message[0]}" if message else type(error).__name__
    return line if len(line) <= FAILURE_CHARACTERS else line[: FAILURE_CHARACTERS - 1] + "…"
