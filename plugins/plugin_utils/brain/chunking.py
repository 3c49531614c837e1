"""Cutting a document into chunks: Markdown on its headings (outside code fences), a man page (man or basic mdoc
macros) on its sections, then each section by size with overlap, each chunk starting with where it is (title >
heading > ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

CHUNK_SIZE = 1000
CHUNK_OVERLAP = 150
# Part of every document's fingerprint: a change to how documents are cut re-cuts all of them.
CHUNKER_VERSION = "1"


@dataclass(frozen=True)
class Chunk:
    text: str
    section: str


Section = tuple[Sequence[str], str]  # (heading path, text)


def cut(title: str, sections: Iterable[Section]) -> tuple[Chunk, ...]:
    """Chunks of about CHUNK_SIZE characters, each starting with where it is (title > heading > ...)."""
    chunks = []
    for headings, text in sections:
        crumbs = list(headings) if headings and headings[0].casefold() == title.casefold() else [title, *headings]
        where = " > ".join(crumbs)
        for piece in split_by_size(text, max(CHUNK_SIZE - len(where) - 2, CHUNK_SIZE // 2)):
            chunks.append(Chunk(f"{where}\n\n{piece}", where))
    return tuple(chunks)


_WHITESPACE = re.compile(r"\s+")


def split_by_size(text: str, size: int = CHUNK_SIZE, overlap: int = CHUNK_OVERLAP) -> list[str]:
    """Pieces of at most ``size`` characters, ending after a paragraph, line, sentence or word where one is near,
    each starting ``overlap`` characters (on a word) before the previous one ended."""
    text = text.strip()
    pieces = []
    start = 0
    while len(text) - start > size:
        end = _break_point(text, start + size // 2, start + size)
        pieces.append(text[start:end].strip())
        overlap_start = max(end - overlap, start + 1)
        space = _WHITESPACE.search(text, overlap_start - 1, end) if not text[overlap_start - 1].isspace() else None
        start = space.end() if space else overlap_start
    pieces.append(text[start:].strip())
    return [piece for piece in pieces if piece]


def _break_point(text: str, low: int, high: int) -> int:
    for separator in ("\n\n", "\n", ". ", " "):
        found = text.rfind(separator, low, high)
        if found != -1:
            return found + len(separator)
    return high


_FRONT_MATTER = re.compile(r"\A---[ \t]*\n.*?\n---[ \t]*(?:\n|\Z)", re.DOTALL)
_ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def markdown_sections(text: str) -> tuple[str | None, list[Section]]:
    """(the first level-1 heading, [(heading path, text)]); headings inside code fences are text."""
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []
    lines: list[str] = []
    title = None
    fence = None

    def close_section() -> None:
        body = "\n".join(lines).strip()
        if body:
            sections.append((tuple(heading for _level, heading in stack), body))
        lines.clear()

    def open_section(level: int, heading: str) -> None:
        nonlocal title
        close_section()
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, heading))
        if title is None and level == 1:
            title = heading

    for line in _FRONT_MATTER.sub("", text, count=1).splitlines():
        if fence:
            lines.append(line)
            if line.strip().startswith(fence):
                fence = None
            continue
        fenced = _FENCE.match(line)
        atx = _ATX_HEADING.match(line)
        underline = _SETEXT_UNDERLINE.match(line)
        if fenced:
            fence = fenced.group(1)
            lines.append(line)
        elif atx:
            open_section(len(atx.group(1)), atx.group(2).strip())
        elif underline and lines and lines[-1].strip() and (len(lines) == 1 or not lines[-2].strip()):
            heading = lines.pop().strip()
            open_section(1 if underline.group(1)[0] == "=" else 2, heading)
        else:
            lines.append(line)
    close_section()
    return title, sections


# troff escapes: \f font, \* string, \n register, \s size, \(xx and \[name] characters, \h'..' motions
_TROFF_ESCAPE = re.compile(r"""\\(\[[^\]]*\]|\(..|[fF*nsgkm]\[[^\]]*\]|[fF*nsgkm]\(..|s[+-]?\d+|[fF*ngkm].|[hvwoxlLbDNRZCX]'[^']*'|.)""")
_TROFF_COMMENT = re.compile(r'\\["#].*$')
_TROFF_CHARACTERS = {
    "em": "--", "en": "-", "hy": "-", "mi": "-", "aq": "'", "dq": '"', "lq": '"', "rq": '"', "oq": "'", "cq": "'", "bu": "*",
    "co": "(c)", "rg": "(R)", "tm": "(TM)", "pl": "+", "mu": "x", "<=": "<=", ">=": ">=", "->": "->", "<-": "<-", "ga": "`",
    "ti": "~", "ha": "^", "rs": "\\", "sl": "/", "ba": "|", "or": "|", "de": " degrees", "lB": "[", "rB": "]", "lC": "{", "rC": "}",
}
_TROFF_SIMPLE = {
    "-": "-", "e": "\\", "\\": "\\", "&": "", " ": " ", "~": " ", "0": " ", "|": "", "^": "", "%": "", "c": "", ":": "", ",": "",
    "/": "", "'": "'", "`": "`", ".": ".", "t": "\t", "d": "", "u": "", "r": "", "p": "", "z": "", "a": "",
}
_MAN_HEADINGS = {"SH": 1, "Sh": 1, "SS": 2, "Ss": 2}
_MAN_ALTERNATING = frozenset({"BR", "BI", "IB", "IR", "RB", "RI"})
# Requests and macros that break the text; sp, br, nf and fi are roff requests, Sp, Vb and Ve pod2man's.
_MAN_BREAKS = frozenset({"PP", "LP", "P", "TP", "TQ", "HP", "Pp", "Lp", "Bl", "El", "Bd", "Ed", "RS", "RE", "Sp", "sp", "br"})
_MAN_NO_FILL = frozenset({"nf", "EX", "Vb", "Bd"})
_MAN_FILL = frozenset({"fi", "EE", "Ve", "Ed"})
# Capitalized macros without text (roff requests, all lower case, never have any).
_MAN_SILENT = frozenset({"TH", "Dd", "Dt", "Os", "UE", "ME", "YS", "PD", "DT", "AT", "UC", "IX"})
_BLOCK_DEFINITIONS = frozenset({"de", "de1", "am", "ig"})
_TROFF_CONTINUATION = re.compile(r"(?<!\\)\\\n")  # a line ending in a backslash goes on on the next line
_MACRO = re.compile(r"^[.'][ \t]*([^ \t\\]*)[ \t]*(.*)$")


def man_page_sections(source: str) -> tuple[str | None, list[Section]]:
    """The text of a man page (man or basic mdoc macros): (NAME(SECTION) from .TH, [(heading path, text)]).

    Filled text is joined into paragraphs as troff would; no-fill blocks (examples) keep their lines.
    """
    sections: list[Section] = []
    headings: list[str] = []
    lines: list[str] = []
    title = None
    skip_until_dots = False
    fill = True

    def add(text: str) -> None:
        if fill and lines and lines[-1] and text:
            lines[-1] = f"{lines[-1]} {text}"
        else:
            lines.append(text)

    def close_section() -> None:
        body = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
        if body:
            sections.append((tuple(headings), body))
        lines.clear()

    for raw in _TROFF_CONTINUATION.sub("", source).splitlines():
        if skip_until_dots:
            skip_until_dots = raw.strip() != ".."
            continue
        line = _TROFF_COMMENT.sub("", raw)
        request = _MACRO.match(line)
        if request is None:
            add(troff_text(line).strip() if fill else troff_text(line))
            continue
        macro, arguments = request.group(1), _troff_arguments(request.group(2))
        if macro in _BLOCK_DEFINITIONS:
            skip_until_dots = True
        elif macro == "TH" and arguments:
            title = f"{arguments[0]}({arguments[1]})" if len(arguments) > 1 else arguments[0]
        elif macro in _MAN_HEADINGS:
            close_section()
            del headings[_MAN_HEADINGS[macro] - 1:]
            headings.append(" ".join(arguments).strip() or "(untitled)")
        elif macro in _MAN_NO_FILL or macro in _MAN_FILL:
            fill = macro in _MAN_FILL
            lines.append("")
        elif macro in _MAN_BREAKS:
            lines.append("")
        elif macro == "IP":
            lines.extend(["", arguments[0]] if arguments else [""])
        elif macro in _MAN_ALTERNATING:
            add("".join(arguments))
        elif macro == "OP":
            add(f"[{' '.join(arguments)}]")
        elif macro[:1].isupper() and macro not in _MAN_SILENT:
            add(" ".join(arguments))  # B, I, SM, UR, SY, and mdoc's Nm, Nd, Fl, Ar, ...: their words
    close_section()
    return title, sections


def troff_text(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        escape = match.group(1)
        if escape.startswith("["):
            return _TROFF_CHARACTERS.get(escape[1:-1], "")
        if escape.startswith("("):
            return _TROFF_CHARACTERS.get(escape[1:], "")
        if escape[0] in "fF*nsgkmhvwoxlLbDNRZCX" and len(escape) > 1:
            return ""
        return _TROFF_SIMPLE.get(escape, escape)

    return _TROFF_ESCAPE.sub(replace, text)


# A macro's arguments: words, or "quoted words" in which "" is a quote.
_TROFF_ARGUMENT = re.compile(r'"((?:[^"]|"")*)(?:"|$)|(\S+)')


def _troff_arguments(rest: str) -> list[str]:
    return [troff_text(quoted.replace('""', '"') if quoted else word) for quoted, word in _TROFF_ARGUMENT.findall(rest)]
