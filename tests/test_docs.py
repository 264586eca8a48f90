"""The docs name what exists: every module has its paragraph in docs/architecture.md, and every
``envrec.…`` name the README and docs/ write in backticks imports."""

from __future__ import annotations

import importlib
import os
import re

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
DOCS = ["README.md", *(os.path.join("docs", n) for n in sorted(os.listdir(os.path.join(ROOT, "docs"))) if n.endswith(".md"))]


def _modules() -> list[str]:
    found = []
    for top in ("pipeline", "workers", "export", "viewer"):
        for folder, dirs, names in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            found += [os.path.relpath(os.path.join(folder, n), ROOT) for n in names if n.endswith(".py") and n != "__init__.py"]
    return sorted(found)


def test_every_module_has_its_paragraph_in_architecture_md():
    text = open(os.path.join(ROOT, "docs", "architecture.md")).read()
    listed = set(re.findall(r"^\* `(\w+)`|; `(\w+)`", text, re.MULTILINE))
    names = {n for pair in listed for n in pair if n}
    missing = [m for m in _modules() if os.path.basename(m)[:-3] not in names]
    assert len(_modules()) > 80 and not missing, missing


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


@pytest.mark.parametrize("doc", DOCS)
def test_every_envrec_name_in_the_docs_imports(doc):
    text = open(os.path.join(ROOT, doc)).read()
    names = {m.rstrip(".") for m in re.findall(r"`(envrec(?:\.\w+)+)(?:\(|`)", text)}
    wrong = sorted(n for n in names if not _resolves(n))
    assert not wrong, f"{doc} names what does not exist: {wrong}"


def test_a_wrong_name_is_caught():
    assert _resolves("envrec.contract.protocol.Handler") and _resolves("envrec.RecordTrace")
    assert not _resolves("envrec.contract.protocol.NoSuchThing") and not _resolves("envrec.nosuchroom.module")


def _anchors(text: str) -> set[str]:
    """GitHub's anchors for a Markdown file's headings: lower case, punctuation gone, spaces as hyphens."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", text, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def _broken_links(doc: str) -> list[str]:
    text = open(os.path.join(ROOT, doc)).read()
    text = re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)  # code blocks hold no links
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s): not ours to check here
        path, _, anchor = target.partition("#")
        file = os.path.normpath(os.path.join(ROOT, os.path.dirname(doc), path)) if path else os.path.join(ROOT, doc)
        if not os.path.exists(file):
            broken.append(f"{target}: no such file")
        elif anchor and file.endswith(".md") and anchor not in _anchors(open(file).read()):
            broken.append(f"{target}: no such heading")
    return broken


@pytest.mark.parametrize("doc", DOCS)
def test_every_link_in_the_docs_leads_somewhere(doc):
    """Relative links name files that exist, and their #anchors headings of those files (so moved text is found)."""
    broken = _broken_links(doc)
    assert not broken, f"{doc}: {broken}"


def test_a_broken_link_is_caught(tmp_path, monkeypatch):
    """The check is not vacuous: a missing heading and a missing file are both reported."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\n## Long runs: compression and disk budgets\n")
    (tmp_path / "README.md").write_text("[ok](docs/a.md#long-runs-compression-and-disk-budgets) [no](docs/a.md#nope) [gone](docs/b.md)\n")
    monkeypatch.setitem(globals(), "ROOT", str(tmp_path))
    assert _broken_links("README.md") == ["docs/a.md#nope: no such heading", "docs/b.md: no such file"]
