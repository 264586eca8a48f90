"""A folder that fills up (ENOSPC): the env goes on, the failure is reported, nothing committed is lost.

Each case runs its env process in a private mount namespace (``unshare``) on a
tmpfs of a few hundred KiB, so the disk really fills and nothing is left
mounted afterwards.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess

import pytest

from .support.processes import child_command, child_env


def run_on_tiny_fs(tmp_path, kind: str, size: str) -> dict:
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.fail("the disk-full tests need util-linux's unshare")
    folder = tmp_path / "tiny"
    folder.mkdir()
    as_root = os.geteuid() == 0
    child = shlex.join(child_command("child_diskfull.py", str(folder), kind))
    script = f'mount -t tmpfs -o size={size} tmpfs "{folder}" && exec {child}'
    cmd = [unshare, "--mount", "--propagation", "private"] + ([] if as_root else ["--map-root-user"]) + ["sh", "-c", script]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=child_env())
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def test_trace_folder_fills_up(tmp_path):
    result, log = run_on_tiny_fs(tmp_path, "trace", "256k")
    assert result["raised"] is None  # the env never saw an exception
    stats = result["stats"]
    assert stats["broken"] and "No space left on device" in stats["broken"]
    assert str(tmp_path / "tiny") in stats["broken"]  # the error names where
    assert "broken" in log and "No space left on device" in log  # logged in the env process, with the cause
    assert result["episodes_readable"] > 0 and result["lengths_ok"]  # what was committed reads back whole
    assert result["problems"] == []  # every file the manifest names is complete
    assert "No space left" in (result["manifest_error"] or "")  # the manifest says why it stopped
    assert stats["restarts"] == 3  # successors were tried, and failed the same way
    # every record is accounted for: in a committed episode (a reset and 10 steps each), or counted as lost
    assert stats["records_lost"] == stats["records_sent"] - 11 * result["episodes_readable"]
    assert result["tmp_files"] == []
    # Once broken, before close: no partial batch, spill, checkpoint or unnamed batch file of the failed serializers.
    assert result["left_while_broken"] == []


def test_video_folder_fills_up(tmp_path):
    result, log = run_on_tiny_fs(tmp_path, "video", "512k")
    assert result["raised"] is None  # the env never saw an exception
    first = result["metas"]["clip0.meta.json"]  # the disk filled during the first clip
    assert first["broken"] and "No space left on device" in first["reason"] + " ".join(first.get("stderr_tail", []))
    assert first["path"] is None and "disk was full" in first["partial_removed"]
    assert "No space left on device" in log  # reported in the env process
    assert result["tmp_files"] == []
