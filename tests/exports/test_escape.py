"""Names as text in Markdown (outside and inside code spans), LaTeX and a shell command: each renders as exactly its
characters, and none is markup."""

import json
import shlex

import pytest
from hostile import HOSTILE_NAMES, read_latex, rendered, shown

from pipelines.exports.escape import latex_text, md_code, md_text, shell_json_string, visible
from pipelines.exports.report import table

CHARACTERS = "".join(chr(c) for c in range(32, 127)) + "é中🙂"


@pytest.mark.parametrize("name", [*HOSTILE_NAMES, CHARACTERS, "`", " ", "a "])
def test_markdown_text_and_code_render_as_the_name_and_nothing_else(name):
    for escaped in (md_text(name), md_code(name)):
        paragraph = rendered(f"Run {escaped} here.")
        assert [tag for tag, _ in paragraph.elements] in (["p"], ["p", "code"])
        assert "".join(paragraph.text).strip() == f"Run {shown(name)} here."
        cells = rendered(table(["a", "b"], [[escaped, "next"]]))
        assert [tag for tag, _ in cells.elements] in (
            ["table", "thead", "tr", "th", "th", "tbody", "tr", "td", "td"],
            ["table", "thead", "tr", "th", "th", "tbody", "tr", "td", "code", "td"],
        )
        assert [t for t in cells.text if t.strip()][2:] == [shown(name), "next"] or shown(name).strip() == ""


def test_control_characters_are_shown_as_their_escapes():
    assert visible("a\nb\tc\x7f") == "a\\x0ab\\x09c\\x7f"


@pytest.mark.parametrize("name", [*HOSTILE_NAMES, CHARACTERS, "\\textbf{x}", "a\\\\b"])
def test_latex_text_reads_back_as_the_name(name):
    assert read_latex(latex_text(name)) == shown(name)


@pytest.mark.parametrize("name", [*HOSTILE_NAMES, "it's", "x'; rm -rf ~; echo '"])
def test_a_name_in_a_single_quoted_shell_json_argument_stays_one_string(name):
    argument = f"'{{\"model\": {shell_json_string(name)}}}'"
    [word] = shlex.split(argument)
    assert json.loads(word) == {"model": shown(name)}
