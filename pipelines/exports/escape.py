"""Names, ids and labels as plain text in the exports' formats (Markdown, LaTeX, a shell command): never markup."""

from __future__ import annotations

import json
import re

# A control character (a newline in a run name, say) would end a table row, a heading or a code fence: it is written
# as its escape, \xNN, which every format shows as text.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Characters Markdown (CommonMark and GitHub's tables, strikethrough and math) reads as markup anywhere in a line;
# each is escaped with a backslash, which CommonMark allows before any ASCII punctuation.
_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_\[\]~$!#])")
# As HTML entities, which Markdown decodes to the character as text: `<`, `>` and `&` can then open no tag or entity,
# and a `|` splits no table cell.
_MARKDOWN_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "&#124;"}
_LATEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
}
_LATEX_SPECIAL = re.compile("|".join(re.escape(c) for c in _LATEX))


def visible(value) -> str:
    """The value as one line of text: each control character written as its escape (\\x0a for a newline)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))


def md_text(value) -> str:
    """The value as Markdown text outside a code span: it renders as exactly its characters, no tag, link, emphasis
    or table cell."""
    text = "".join(_MARKDOWN_ENTITIES.get(c, c) for c in _MARKDOWN_PUNCTUATION.sub(r"\\\1", visible(value)))
    # Spaces at either end would be trimmed from a table cell or a line: as entities they stay.
    body, lead = text.strip(" "), len(text) - len(text.lstrip(" "))
    return "&#32;" * lead + body + "&#32;" * (len(text) - lead - len(body))


def md_code(value) -> str:
    """The value as a Markdown code span, fenced by one backtick more than its longest run of backticks. In a table
    cell its `|` still needs the table's escape (report.table adds it)."""
    text = visible(value)
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    # CommonMark strips one space at each end when both ends hold one: a padded span keeps the value's own spaces, and
    # a value starting or ending with a backtick apart from the fence.
    # (A value of spaces only is kept as it is, and an empty one has no span.)
    if not text.strip(" "):
        return f"{fence}{text}{fence}" if text else ""
    padded = text[:1] in ("`", " ") or text[-1:] in ("`", " ")
    return f"{fence} {text} {fence}" if padded else f"{fence}{text}{fence}"


def latex_text(value) -> str:
    """The value as LaTeX text: its characters typeset as they are, none of them a command."""
    return _LATEX_SPECIAL.sub(lambda m: _LATEX[m.group()], visible(value))


def shell_json_string(value) -> str:
    """The value as a JSON string, for a JSON document inside a single-quoted shell argument: a quote in the value
    closes nothing."""
    return json.dumps(visible(value)).replace("'", "'\\''")
