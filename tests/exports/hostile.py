"""Names that are markup in some export format, and independent readings of the exports: Markdown rendered with HTML
on, LaTeX text read back to its characters."""

import re
from html.parser import HTMLParser

from markdown_it import MarkdownIt

HOSTILE_NAMES = [
    "run_<img src=x onerror=alert(1)>",
    "snap</script><script>alert(1)</script>",
    "a|b",
    "a`b",
    "``x``",
    "x_{1}$\\&",
    "*em* _u_ [l](http://e.x) ~~s~~ &amp; &#60;b&#62;",
    "new\nline",
    " padded ",
    "100% #1 ^2 ~x {y}",
    "\\|\\",
    "=cmd|' /C calc'!A0",
]

# A viewer that renders HTML inside Markdown, as GitHub's does in part and many editors do in full.
RENDERER = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])


class Elements(HTMLParser):
    """The elements of an HTML fragment, with their attributes, and its text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def rendered(markdown: str) -> Elements:
    parser = Elements()
    parser.feed(RENDERER.render(markdown))
    parser.close()
    return parser


def shown(name: str) -> str:
    """What a reader sees of a name: its control characters as their escapes."""
    return re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\x{ord(m.group()):02x}", name)


# An independent reading of LaTeX text: each escape back to its character.
LATEX_READING = {
    r"\textbackslash{}": "\\",
    r"\textasciitilde{}": "~",
    r"\textasciicircum{}": "^",
    r"\textless{}": "<",
    r"\textgreater{}": ">",
    r"\textbar{}": "|",
    **{f"\\{c}": c for c in "&%$#_{}"},
}


def read_latex(text: str) -> str:
    pattern = "|".join(re.escape(k) for k in sorted(LATEX_READING, key=len, reverse=True))
    rest = re.sub(pattern, "", text)
    assert not set(rest) & set("\\&%$#_{}~^<>|"), f"unescaped in {text!r}"  # nothing left a LaTeX special
    return re.sub(pattern, lambda m: LATEX_READING[m.group()], text)
