"""Install hints that work however envrec was installed (issue 36: 'pip install envrec[atari]' for a package
installed from its source): the extra's packages, then the extra from the clone, the wheel or the index."""

from __future__ import annotations

import json

import pytest

from envrec import extras


class FakeDistribution:
    def __init__(self, direct_url: dict | None, requires: list[str]) -> None:
        self.direct_url, self.requires = direct_url, requires

    def read_text(self, name: str) -> str | None:
        return json.dumps(self.direct_url) if name == "direct_url.json" and self.direct_url is not None else None


REQUIRES = ['pytest>=8; extra == "test"', 'ale-py>=0.9; extra == "atari"', "numpy>=1.26"]


@pytest.mark.parametrize("direct_url, own", [
    ({"url": "file:///home/me/envrec", "dir_info": {"editable": True}}, "from its clone: pip install -e '/home/me/envrec[atari]'"),
    ({"url": "file:///home/me/envrec", "dir_info": {}}, "from its folder: pip install '/home/me/envrec[atari]'"),
    ({"url": "file:///tmp/w/envrec-0.1.0-py3-none-any.whl", "archive_info": {}},
     "from its wheel: pip install '/tmp/w/envrec-0.1.0-py3-none-any.whl[atari]'"),
    (None, "pip install 'envrec[atari]'"),
])
def test_the_hint_names_the_packages_then_the_extra_from_where_envrec_came(monkeypatch, direct_url, own):
    monkeypatch.setattr(extras, "_distribution", lambda: FakeDistribution(direct_url, REQUIRES))
    assert extras.extra_packages("atari") == ["ale-py>=0.9"]
    assert extras.install_hint("atari") == f"pip install 'ale-py>=0.9' (envrec's atari extra; {own})"


def test_an_extra_the_metadata_does_not_know_is_named_alone(monkeypatch):
    monkeypatch.setattr(extras, "_distribution", lambda: FakeDistribution(None, REQUIRES))
    assert extras.install_hint("sb3") == "pip install 'envrec[sb3]'"
    monkeypatch.setattr(extras, "_distribution", lambda: None)  # envrec imported from a checkout, not installed
    assert extras.install_hint("atari") == "pip install 'envrec[atari]'"
