"""Every `python` block of the Python guide (docs/python/*.md), run as written: the blocks of
one chapter share a namespace, in order, so a chapter is one runnable program."""

import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python"
CHAPTERS = sorted(DOCS.glob("*.md"))
BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def test_every_chapter_is_found():
    names = {p.name for p in CHAPTERS}
    assert {"README.md", "transforms.md", "control-flow.md", "linalg.md", "ode.md", "random-and-io.md"} <= names


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_chapter_runs_as_written(chapter, capsys):
    blocks = BLOCK.findall(chapter.read_text())
    assert blocks, chapter
    namespace = {"__name__": f"docs_{chapter.stem}"}
    for k, code in enumerate(blocks):
        exec(compile(code, f"{chapter.name}[block {k}]", "exec"), namespace)
