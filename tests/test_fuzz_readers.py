"""Every reader, on mutants of real recordings of every kind: a ``TraceError`` (or a clean exit), never anything else.

Recordings are made once per module by envrec itself: plain, compressed
(zstd), with Dict/Tuple/Text/MultiDiscrete/MultiBinary spaces and infos,
with clips (mp4 and their metadata), with closed manifest segments (the
serializer's segment size made small, so a few batches close segments), and
with episodes in parts (``batch_bytes`` so small that every episode is cut:
part records, ``head_part``/``continues`` entries). Each
hypothesis example mutates a copy (see ``fuzz_mutants``) and runs every
reader on it: ``TraceReader`` (iterated, every array's bytes read, and with
``on_damaged="skip"``), ``envrec inspect``, the Parquet export (to Arrow
tables, as ``to_parquet`` writes them), the Minari export (on a share of the
examples: it is the slowest), and the viewer's catalog (index and every
episode's plot data, as JSON the server can send).

The property: only ``TraceError`` comes out, ``inspect`` exits 0, 1 or 2
with no traceback, and when the mutant leads a name outside the folder
(symlink, ``..``, absolute) every reader of that file refuses it. Runs are
derandomized with no example database, so CI sees the same examples;
``ENVREC_FUZZ_EXAMPLES`` raises the count (the README's figures were
measured with it) and the totals are printed at the module's end (``-rA``
or ``-s`` shows them).

A second test is systematic where the fuzz is random: every field of every
kind of document (manifest, segment, batch, compressed batch, clip
metadata) deleted, made null or of another type, numbers huge or negative.
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import os
import shutil
import tempfile

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces as S
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import envrec
from envrec.cli import main as cli_main
from envrec.read.batch_files import TraceError
from envrec.viewer.catalog import Catalog, NotFound

from .support.batch_json import load_batch
from .support.episodes import record_cartpole, run_episodes
from .support.fuzz_mutants import _get, copy_linked, field_paths, fix_checksums, mutants, set_field, wrong_values
from .support.scripts import write_segmented

pytestmark = pytest.mark.timeout(300)

EXAMPLES = int(os.environ.get("ENVREC_FUZZ_EXAMPLES", "30"))  # per kind of recording; 6 kinds: ~25 s
MINARI_EVERY = 4  # the Minari export runs on every 4th mutant: a dataset costs ~0.1 s
KINDS = ("plain", "compressed", "spaces", "clips", "segmented", "parts")
TRIED: collections.Counter[str] = collections.Counter()  # reader -> mutants it was run on
REFUSED: collections.Counter[str] = collections.Counter()  # reader -> mutants it refused with TraceError
LISTED_DAMAGED: collections.Counter[str] = collections.Counter()  # the viewer: mutants whose index had damaged rows
ESCAPES: collections.Counter[str] = collections.Counter()  # mutants leading a trace, meta or clip name out of the folder
FIELDS_TRIED: collections.Counter[str] = collections.Counter()  # recording kind -> field mutants of its documents


def _plain(folder: str, compression=None, prefix: str = "cp", batch_bytes: int = 1500) -> None:
    env = envrec.RecordTrace(gym.make("CartPole-v1"), folder, name_prefix=prefix, batch_bytes=batch_bytes, compression=compression,
                             commit_interval=None)
    env.action_space.seed(0)
    run_episodes(env, 3)
    env.reset()  # and the 0-step episode a recording ends with
    env.close()


def _spaces(folder: str) -> None:
    obs = S.Dict({"pos": S.Box(-1, 1, (3,), np.float32), "name": S.Text(6), "grid": S.MultiBinary([2, 2])})
    act = S.Tuple((S.Discrete(3), S.MultiDiscrete([2, 5])))
    rec = envrec.TraceRecorder(folder, obs, act, name_prefix="sp", batch_bytes=1500)
    obs.seed(1)
    act.seed(1)
    for ep in range(3):
        rec.add_reset(obs.sample(), {"start": ep}, seed=ep, options={"level": ep})
        for t in range(5 + ep):
            info = {"t": t, "arr": np.arange(3, dtype=np.int16), "nan": float("nan"), "pair": (1, "a"), "raw": b"\x00"}
            rec.add_step(act.sample(), obs.sample(), float(t), t == 4 + ep, False, info)
    rec.close()


def _clips(folder: str) -> None:
    record_cartpole(folder, 2, video=True, action_seed=2, name_prefix="cv")


def _segmented(folder: str) -> None:
    write_segmented(folder, 3, [1 + k % 3 for k in range(8)])


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    makers = {"plain": _plain, "compressed": lambda f: _plain(f, "zstd"), "spaces": _spaces, "clips": _clips,
              "segmented": _segmented, "parts": lambda f: _plain(f, prefix="pt", batch_bytes=300)}
    out = {}
    for kind, make in makers.items():
        folder = str(root / kind)
        make(folder)
        for name in os.listdir(folder):  # what readers never open (the serializer's hidden checkpoint)
            if name.startswith("."):
                os.remove(os.path.join(folder, name))
        assert len(envrec.TraceReader(folder)) > 0
        out[kind] = folder
    assert any(n.endswith(".m000001.manifest.json") for n in os.listdir(out["segmented"]))
    assert any(n.endswith(".p000002.json") for n in os.listdir(out["parts"]))
    assert any(n.endswith(".mp4") for n in os.listdir(out["clips"]))
    assert json.load(open(os.path.join(out["compressed"], "cp.manifest.json")))["settings"]["compression"]
    return out


def _touch(value) -> None:
    """Read every byte of a field (Dict/Tuple leaves, text)."""
    if isinstance(value, dict):
        for v in value.values():
            _touch(v)
    elif isinstance(value, tuple | list) and not (value and isinstance(value[0], str)):
        for v in value:
            _touch(v)
    elif value is not None and not isinstance(value, list):
        np.asarray(value).tobytes()


def _read_all(folder: str, on_damaged: str) -> None:
    with envrec.TraceReader(folder, on_damaged=on_damaged) as reader:
        for ep in reader:
            for field in (ep.observations, ep.actions, ep.rewards, ep.terminations, ep.truncations):
                _touch(field)
            json.dumps(repr(ep.infos) + repr(ep.options))
        if len(reader) and on_damaged == "raise":
            reader[len(reader) - 1]
            list(reader.iter_parts(0))
        assert on_damaged == "raise" or all(d.file and d.reason for d in reader.damaged)


def _inspect(folder: str) -> int:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(["inspect", folder])
    assert code in (0, 1, 2) and "Traceback" not in err.getvalue(), (code, err.getvalue())
    if code == 2:
        raise TraceError(err.getvalue())  # counted as refused: the folder is not a trace at all
    return code


def _arrow(folder: str) -> None:
    from envrec.export import to_arrow

    to_arrow(folder).validate(full=True)


def _minari(folder: str) -> None:
    import minari

    from envrec.export import to_minari

    dataset_id = "fuzz/mutant-v0"  # one id, deleted after each: a namespace per mutant would slow Minari's listing
    try:
        to_minari(folder, dataset_id, author="fuzz", author_email="fuzz@example.org", algorithm_name="random",
                  description="a mutant", code_permalink="https://example.org")
    finally:
        if dataset_id in minari.list_local_datasets():
            minari.delete_dataset(dataset_id)


def _viewer(folder: str) -> list:
    catalog = Catalog(folder)
    index = catalog.index()
    json.dumps(index, allow_nan=False)  # what the server sends
    summary = catalog.summary()  # the lazy index the pages use: summaries, then each recording's page
    json.dumps(summary, allow_nan=False)
    for r in summary["recordings"]:
        json.dumps(catalog.episodes(r["name"], 0, 1000, "-length"), allow_nan=False)
    json.dumps(catalog.clips(), allow_nan=False)
    for ep in index["episodes"]:
        try:
            json.dumps(catalog.episode(ep["recording"], ep["episode_id"]), allow_nan=False)
        except (TraceError, NotFound):
            pass  # answered 422 / 404, the index still works
    return index["damaged"]


def _attempt(reader: str, fn) -> bool:
    """Run one reader on the mutant: True when it read it, False when it refused it with TraceError."""
    TRIED[reader] += 1
    try:
        fn()
    except TraceError:
        REFUSED[reader] += 1
        return False
    return True


def _run_readers(folder: str, escaped: str | None, n: int) -> None:
    read = _attempt("TraceReader", lambda: _read_all(folder, "raise"))
    _attempt("TraceReader(on_damaged='skip')", lambda: _read_all(folder, "skip"))
    code: list[int] = []
    _attempt("envrec inspect", lambda: code.append(_inspect(folder)))
    _attempt("Parquet/Arrow export", lambda: _arrow(folder))
    if n % MINARI_EVERY == 0:
        _attempt("Minari export", lambda: _minari(folder))
    damaged: list = []
    _attempt("viewer catalog", lambda: damaged.extend(_viewer(folder)))
    LISTED_DAMAGED["viewer catalog"] += bool(damaged)
    ESCAPES[escaped or "none"] += 1
    if escaped == "trace":
        assert not read, "TraceReader read a trace file outside the folder"
    if escaped is not None:
        assert code != [0], "inspect found nothing wrong with a file outside the folder"
    if escaped in ("trace", "meta"):
        assert damaged, "the viewer listed a file outside the folder as intact"


@pytest.fixture(scope="module", autouse=True)
def figures(request):
    """Print the totals when the module is done (mutants per reader, refused with TraceError)."""
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and TRIED:
        reporter.write_line("\nfuzz of the readers: mutants tried per reader, refused with TraceError, no other exception")
        for reader, n in TRIED.items():
            rows = f", {LISTED_DAMAGED[reader]} listed damaged rows" if reader in LISTED_DAMAGED else ""
            reporter.write_line(f"  {reader}: {n} tried, {REFUSED[reader]} refused{rows}")
    if reporter is not None and TRIED:
        out = {k: v for k, v in ESCAPES.items() if k != "none"}
        reporter.write_line(f"  names or symlinks leading out of the folder: {out}, every one refused by the readers of that file")
    if reporter is not None and FIELDS_TRIED:
        reporter.write_line(f"every field: {sum(FIELDS_TRIED.values())} mutants ({dict(FIELDS_TRIED)}), each through "
                            f"{', '.join(FIELD_READERS)}: TraceError or read, nothing else")


@pytest.fixture
def minari_home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))


@pytest.mark.variants  # the development tier fuzzes the plain recording; the full tier every kind
@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_every_reader_raises_only_trace_errors_on_mutants(recordings, minari_home, tmp_path, kind, data):
    base = tempfile.mkdtemp(dir=tmp_path)
    try:
        folder, outside = os.path.join(base, "rec"), os.path.join(base, "outside")
        copy_linked(recordings[kind], folder)
        os.mkdir(outside)
        m = data.draw(mutants(folder, outside))
        note(f"mutations: {m.ops}")
        _run_readers(folder, m.escaped, TRIED["TraceReader"])
    finally:
        shutil.rmtree(base)


def _first(folder: str, suffix: str, skip: str = "\0") -> str:
    return next(n for n in sorted(os.listdir(folder)) if n.endswith(suffix) and skip not in n)


DOCUMENTS = [  # (recording, which of its JSON files): every kind of document a reader parses
    ("plain", "cp.manifest.json"), ("plain", ".ep000000000.json"), ("compressed", ".ep000000000.json.zst"),
    ("spaces", "sp.manifest.json"), ("spaces", ".ep000000000.json"), ("segmented", "bench.manifest.json"),
    ("segmented", ".m000000.manifest.json"), ("clips", ".meta.json"), ("parts", "pt.manifest.json"),
    ("parts", ".ep000000000.json"), ("parts", ".p000001.json"),
]


FIELD_READERS = {"TraceReader": lambda f: _read_all(f, "raise"), "Parquet/Arrow export": _arrow, "viewer catalog": _viewer}


@pytest.mark.parametrize("kind, document", DOCUMENTS)
def test_every_field_deleted_or_of_the_wrong_type_is_a_trace_error(recordings, tmp_path, kind, document):
    """Systematic where the fuzz is random: each field of each document (a list's first item standing for the
    rest) deleted, made null or of another type, numbers huge or negative, sizes and CRC-32s then made to match."""
    name = _first(recordings[kind], document)
    doc = load_batch(os.path.join(recordings[kind], name))
    tried = 0
    for where in field_paths(doc):
        for delete, value in [(True, None), *((False, v) for v in wrong_values(_get(doc, where)))]:
            folder = str(tmp_path / f"m{tried}")
            copy_linked(recordings[kind], folder)
            set_field(os.path.join(folder, name), where, value, delete)
            fix_checksums(folder)
            for reader, fn in FIELD_READERS.items():
                try:
                    fn(folder)
                except TraceError:
                    pass
                except Exception as exc:
                    raise AssertionError(f"{reader}: {name}:{list(where)} {'deleted' if delete else f'= {value!r}'}: "
                                         f"{type(exc).__name__}: {exc}") from exc
            shutil.rmtree(folder)
            tried += 1
    FIELDS_TRIED[kind] += tried
    assert tried >= 10
