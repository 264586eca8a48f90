"""The Python examples of README.md and of the guides in docs/ that hold examples it had run (scripts/ci/readme_examples.py,
also run by .ci/run with the base install alone)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
SCRIPT = os.path.join(ROOT, "scripts", "ci", "readme_examples.py")

pytestmark = pytest.mark.timeout(120)


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=110)


def test_the_readmes_examples_run():
    out = _run()
    assert out.returncode == 0, out.stdout + out.stderr
    ran = [line for line in out.stdout.splitlines() if line.startswith("ran: ")]
    # README: the trace, reader, long-run, video and vector examples; the guides: keep_if, best and worst, ...
    assert sum(line.startswith("ran: README.md line") for line in ran) >= 5, out.stdout
    for guide in ("docs/recording.md", "docs/video.md", "docs/vector.md"):
        assert any(line.startswith(f"ran: {guide} line") for line in ran), out.stdout
    skipped = [line for line in out.stdout.splitlines() if line.startswith("skipped:")]
    assert len(skipped) == 4 and all(n in s for s, n in zip(skipped, ["wandb", "torch", "ray", "stable_baselines3"], strict=True)), out.stdout


def test_a_failing_example_fails_with_its_line(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n```python\nx = 1\n```\n\ntext\n\n```python\nimport wandb, torch, ray, stable_baselines3\n```\n\n```python\n"
                      "assert x == 2, 'the example is wrong'\n```\n")
    out = _run(str(readme))
    assert out.returncode == 1
    assert "the example at README.md line 14 failed" in out.stderr and "the example is wrong" in out.stderr
    assert f'File "{readme}", line 14' in out.stderr  # the traceback points into the README


def test_a_skip_rule_matching_no_example_is_stale(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("```python\nimport wandb, torch, stable_baselines3\n```\n")  # nothing imports ray any more
    out = _run(str(readme))
    assert out.returncode == 1 and "NEEDS lists ['ray'], which no block imports" in out.stderr


def test_each_file_runs_alone_and_a_failure_names_its_file(tmp_path):
    """A guide's examples do not see the README's names: each file has its own namespace."""
    first, guide = tmp_path / "README.md", tmp_path / "guide.md"
    first.write_text("```python\nx = 1\n```\n\n```python\nimport wandb, torch, ray, stable_baselines3\n```\n")
    guide.write_text("```python\nprint(x)\n```\n")
    out = _run(str(first), str(guide))
    assert out.returncode == 1 and "the example at guide.md line 2 failed" in out.stderr and "NameError" in out.stderr
