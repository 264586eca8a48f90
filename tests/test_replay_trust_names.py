"""Every name a recording folder carries, tried as code: nothing it names is imported.

A module that writes a marker file when it is imported is planted twice: inside the folder, importable as
the namespace package ``downloads.run1.evil`` from the folder's parent (the working directory of
``python -m envrec``, put first on ``sys.path``), and as an installed-looking distribution that requires
Gymnasium (``evilsite``, with its ``.dist-info``, on ``sys.path``). Its names are put, one at a time, into
every string field (and every key of the kwargs and reset options) of the manifest and of the batch JSON,
and the folder is verified and rendered: through the Python API, through the command line's ``main`` in a
subprocess whose working directory is the folder's parent, and with ``python -m envrec`` itself. The marker
never appears, and the outcome is a verdict, a clip's reason or an error message, never a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib

import gymnasium as gym
import pytest

import envrec
from envrec.errors import ConfigError, TraceError
from envrec.formats.trace_format import read_manifest, write_manifest
from envrec.replay import render, verify

pytestmark = pytest.mark.timeout(300)

NS, SITE = "downloads.run1.evil", "evilsite"
PLANTED = """import pathlib
pathlib.Path({marker!r}).write_text("imported")
hook = None
def make(**kwargs):
    raise SystemExit("ran")
"""


def _names() -> list[str]:
    return [f"{NS}:hook", f"{SITE}:hook", f"{NS}:CartPole-v1", SITE]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A CartPole recording (a seeded and an unseeded episode) whose spec has a wrapper, kwargs and a snapshot
    name, and whose first episode has reset options: every kind of name replay reads is there to be replaced."""
    folder = tmp_path_factory.mktemp("names-base")
    env = envrec.RecordTrace(gym.wrappers.OrderEnforcing(gym.make("CartPole-v1", render_mode="rgb_array")), str(folder),
                             name_prefix="c")
    env.reset(seed=0, options={"low": -0.05, "high": 0.05, "note": "x"})
    for _ in range(4):
        env.step(0)
    env.reset()
    for _ in range(4):
        env.step(1)
    env.close()
    path = str(folder / "c.manifest.json")
    manifest = read_manifest(path)
    manifest["env"]["snapshot"] = {"name": "ale", "every": None}
    write_manifest(path, manifest)
    return folder


def _plant(home) -> dict[str, str]:
    """The module planted in the folder's parent chain and as an installed distribution; the markers by name."""
    markers = {NS: str(home / "marker-namespace"), SITE: str(home / "marker-site")}
    run1 = home / "downloads" / "run1"
    run1.mkdir(parents=True, exist_ok=True)
    (run1 / "evil.py").write_text(PLANTED.format(marker=markers[NS]))
    site = home / "site"
    (site / SITE).mkdir(parents=True, exist_ok=True)
    (site / SITE / "__init__.py").write_text(PLANTED.format(marker=markers[SITE]))
    info = site / f"{SITE}-1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {SITE}\nVersion: 1.0\nRequires-Dist: gymnasium\n")
    (info / "top_level.txt").write_text(f"{SITE}\n")
    (info / "RECORD").write_text(f"{SITE}/__init__.py,,\n")
    return markers


def _strings(doc, path=()):
    """The path of every string value, and of every key of a kwargs or options object, in a JSON document."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            if path and path[-1] in ("kwargs", "options"):
                yield (*path, ("key", k))
            yield from _strings(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _strings(v, (*path, i))
    elif isinstance(doc, str):
        yield path


def _put(doc, path, name):
    *head, last = path
    for p in head:
        doc = doc[p]
    if isinstance(last, tuple):  # a key: renamed, its value kept
        doc[name] = doc.pop(last[1])
    else:
        doc[last] = name


def _fields(base):
    manifest = read_manifest(str(base / "c.manifest.json"))
    batch = json.loads((base / manifest["batches"][0]["fn"]).read_bytes())
    return [("manifest", p) for p in _strings(manifest)] + [("batch", p) for p in _strings(batch)]


def _reaches_code(field) -> bool:
    """A field replay hands to code (the env, its wrappers, the snapshot hook, the reset): tried on every path."""
    where, path = field
    return (where == "manifest" and path[0] in ("env", "env_id")) or (where == "batch" and "options" in path)


def _crafted(base, folder, field, name) -> str:
    """A copy of ``base`` in ``folder`` whose ``field`` is ``name`` (the batch's checksum kept right: crafted, not damaged)."""
    folder.mkdir(parents=True)
    for f in os.listdir(base):
        if not f.endswith(".verify.json") and os.path.isfile(base / f):
            (folder / f).write_bytes((base / f).read_bytes())
    manifest = read_manifest(str(folder / "c.manifest.json"))
    where, path = field
    if where == "batch":
        entry = manifest["batches"][0]
        doc = json.loads((folder / entry["fn"]).read_bytes())
        _put(doc, path, name)
        data = json.dumps(doc).encode()
        (folder / entry["fn"]).write_bytes(data)
        entry.update(json_bytes=len(data), json_crc32=zlib.crc32(data))
    else:
        _put(manifest, path, name)
    try:
        write_manifest(str(folder / "c.manifest.json"), manifest)
    except (TypeError, ValueError):  # a field the writer itself refuses: left as it was
        pass
    return str(folder)


def _nothing_ran(markers):
    assert not any(os.path.exists(m) for m in markers.values()), "a module a folder names was imported"
    assert not {"downloads", SITE} & set(sys.modules), "a module a folder names was imported"


def test_every_name_in_a_folder_is_never_imported_through_the_api(base, tmp_path, monkeypatch):
    markers = _plant(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.syspath_prepend(str(tmp_path))  # as python -m envrec, a script or a notebook started here
    outcomes = {}
    for n, field in enumerate(_fields(base)):
        for k, name in enumerate(_names()):
            folder = _crafted(base, tmp_path / "downloads" / f"v{n}-{k}", field, name)
            try:
                verdicts = verify(folder)
                outcomes[field, name] = sorted({v.status for v in verdicts})
                assert all(v.reason for v in verdicts if v.status == "cannot_replay"), verdicts
            except (TraceError, ConfigError) as exc:
                outcomes[field, name] = [type(exc).__name__]
                assert str(exc)
            if _reaches_code(field) and k == (n + 1) % len(_names()):  # rendering goes verify's way: one name a field, for time
                try:
                    clips = render(folder, "all", out=tmp_path / "clips" / f"v{n}-{k}")
                    assert all(c.reason for c in clips if c.verdict == "cannot_replay"), clips
                except (TraceError, ConfigError) as exc:
                    assert str(exc)
            _nothing_ran(markers)
    said = {f[1][-1] if not isinstance(f[1][-1], tuple) else "key" for f, _ in outcomes}
    assert {"entry_point", "name", "id", "env_id", "key", "vector_entry_point"} <= said  # the walk reached them
    snapshot = [o for (f, name), o in outcomes.items() if f[1][-2:] == ("snapshot", "name")]
    assert snapshot and all("cannot_replay" in o or o == ["reproduced"] for o in snapshot)


@pytest.mark.slow
def test_verify_and_render_in_a_process_started_in_the_folders_parent(base, tmp_path):
    """The command line, its working directory the folder's parent (``sys.path[0]``, as ``python -m envrec``):
    every field replay hands to code, each of the planted names."""
    markers = _plant(tmp_path)
    runs = []
    for n, field in enumerate(f for f in _fields(base) if _reaches_code(f)):
        for k, name in enumerate(_names()):
            folder = _crafted(base, tmp_path / "downloads" / f"w{n}-{k}", field, name)
            rel = os.path.relpath(folder, tmp_path)
            runs.append(["verify", rel])
            if k == n % len(_names()):  # rendering goes the same way as verify: one name a field, for time
                runs.append(["render", rel, "--episodes", "all", "--out", os.path.join("clips", f"w{n}-{k}")])
    driver = ("import json, sys\nfrom envrec.cli import main\n"
              "codes = [main(argv) for argv in json.load(open(sys.argv[1]))]\n"
              "print('CODES', json.dumps(codes))\n")
    (tmp_path / "runs.json").write_text(json.dumps(runs))
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, "-c", driver, "runs.json"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    codes = json.loads(done.stdout.split("CODES", 1)[1])
    assert len(codes) == len(runs) and set(codes) <= {0, 1, 2}, codes
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert not any(os.path.exists(m) for m in markers.values())
    assert done.stdout.count("cannot replay") >= len(runs) // 4  # most of the names are refused, each saying so


@pytest.mark.parametrize("command", ["verify", "render"])
def test_python_m_envrec_does_not_import_the_snapshot_hook_a_folder_names(base, tmp_path, command):
    """The issue's case: ``downloads/run1/evil.py`` named as ``downloads.run1.evil:hook``, ``python -m envrec``
    run in the folder's parent."""
    markers = _plant(tmp_path)
    field = ("manifest", ("env", "snapshot", "name"))
    folder = _crafted(base, tmp_path / "downloads" / "run1" / "rec", field, f"{NS}:hook")
    rel = os.path.relpath(folder, tmp_path)
    argv = [sys.executable, "-m", "envrec", command, rel, "--episodes", "all"]
    done = subprocess.run(argv, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
                          capture_output=True, text=True, timeout=120)
    _nothing_ran(markers)
    assert done.returncode == 0, done.stdout + done.stderr  # both episodes start at a reset: the hook is not needed
    assert "episode 0: reproduced" in done.stdout and "episode 1: reproduced" in done.stdout, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    if command == "verify":  # it says the hook was not imported, and how to name it
        assert "is not imported" in done.stderr and f"--snapshot {NS}:hook" in done.stderr, done.stderr
