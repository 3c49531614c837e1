"""Cutting documents (brain/chunking.py): by size with overlap, Markdown on its headings, man pages on their
sections."""

from __future__ import annotations

import itertools
from pathlib import Path

from knowledge_samples import NGINX_GUIDE, NGINX_MAN

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.chunking import (
    CHUNK_OVERLAP,
    CHUNK_SIZE,
    man_page_sections,
    markdown_sections,
    split_by_size,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.documents import read_document


def test_split_by_size_keeps_pieces_small_and_overlapping() -> None:
    text = " ".join(f"word{i}" for i in range(1200))
    pieces = split_by_size(text)
    assert len(pieces) > 5
    assert all(len(piece) <= CHUNK_SIZE for piece in pieces)
    for before, after in itertools.pairwise(pieces):
        assert after.split()[0] in before  # the next piece starts inside the previous one
        assert len(before) - before.index(after.split()[0]) <= CHUNK_OVERLAP + 10
    assert " ".join(dict.fromkeys(word for piece in pieces for word in piece.split())) == text  # nothing lost
    assert split_by_size("short") == ["short"] and split_by_size("   ") == []


def test_markdown_is_cut_on_headings_outside_code_fences(tmp_path: Path) -> None:
    title, sections = markdown_sections("---\ntitle: x\n---\n" + NGINX_GUIDE + "\nSetext\n------\n\nunder it\n")
    assert title == "nginx on the web tier"
    assert [tuple(headings) for headings, _text in sections] == [
        ("nginx on the web tier",),
        ("nginx on the web tier", "Reloading"),
        ("nginx on the web tier", "Logs"),
        ("nginx on the web tier", "Setext"),
    ]
    assert "# a fence: this is not a heading" in sections[2][1]
    (tmp_path / "guide.md").write_text(NGINX_GUIDE)
    chunks = read_document(tmp_path / "guide.md").chunks
    assert chunks[1].section == "nginx on the web tier > Reloading"
    assert chunks[1].text.startswith("nginx on the web tier > Reloading\n\nRun `nginx -t` first")


def test_man_pages_lose_their_macros_and_keep_their_sections() -> None:
    title, sections = man_page_sections(NGINX_MAN)
    assert title == "NGINX(8)"
    assert dict((tuple(headings), text) for headings, text in sections) == {
        ("NAME",): "nginx - HTTP and reverse proxy server",
        ("SYNOPSIS",): "nginx [-t]",
        ("DESCRIPTION",): 'nginx (pronounced "engine x") is an HTTP and reverse proxy server, a mail proxy server, '
                          "and a generic TCP/UDP proxy server.",
        ("DESCRIPTION", "Testing the configuration"): "-t Do not run, just test the configuration file.",
    }
    # pod2man's preamble: a macro definition, a request continued on the next line, a conditional block; then no-fill text.
    preamble = '.de Sp \\" vertical space\n.if t .sp .5v\n..\n.if \\n(.H>23 .if \\n(.V>19 \\\n\\{\\\n.    ds : e\n.\\}\n'
    preamble += ".nf\nline one\n  line two\n.fi\n"
    assert man_page_sections(preamble)[1] == [((), "line one\n  line two")]
