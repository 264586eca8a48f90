"""One recorder, several threads: every record whole, none lost uncounted, close() bounded from any thread.

Each thread's action and observation carry its id and its own counter, so
the read-back shows whether a record was torn (an observation paired with
another thread's action), lost, or duplicated. The interpreter's switch
interval is cut to a microsecond so that threads interleave inside calls.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import defaultdict

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces as S

import envrec
from envrec.contract.faults import FaultSpec
from envrec.record.call_lock import CLOSE_GRACE_S

from .support.video import decode

OBS = S.Box(-1e9, 1e9, (3,), np.float64)  # (thread, counter, thread * 1000 + counter)
ACT = S.Box(-1e9, 1e9, (2,), np.float64)  # (thread, counter)
CLOSE_TIMEOUT_S = 10.0


@pytest.fixture
def interleaved():
    """Threads switch every microsecond (the default 5 ms would let most calls run whole by luck)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def step_of(rec, t: int, i: int) -> None:
    rec.add_step(np.array([t, i], float), np.array([t, i, t * 1000 + i], float), float(t * 1000 + i), False, False)


def run_threads(target, n: int) -> list[threading.Thread]:
    threads = [threading.Thread(target=target, args=(t,), daemon=True) for t in range(n)]
    for th in threads:
        th.start()
    return threads


def join_all(threads: list[threading.Thread], timeout_s: float = 60.0) -> None:
    for th in threads:
        th.join(timeout_s)
    assert not any(th.is_alive() for th in threads), "a recording thread is stuck"


def read_pairs(folder) -> dict[int, list[int]]:
    """Each thread's counters in the order recorded; fails on any step whose parts belong to different calls."""
    counters: dict[int, list[int]] = defaultdict(list)
    for ep in envrec.TraceReader(folder):
        for action, obs, reward in zip(ep.actions, ep.observations[1:], ep.rewards, strict=True):
            t, i = int(action[0]), int(action[1])
            assert (obs[0], obs[1], obs[2], reward) == (t, i, t * 1000 + i, t * 1000 + i), f"torn step: {action} {obs} {reward}"
            counters[t].append(i)
    return counters


@pytest.mark.variants
@pytest.mark.parametrize("n_threads", [4, 8])
def test_every_step_of_every_thread_is_recorded_whole(tmp_path, interleaved, n_threads):
    steps = 1500
    rec = envrec.TraceRecorder(tmp_path, OBS, ACT, ring_bytes=1 << 16, close_timeout_s=CLOSE_TIMEOUT_S)
    rec.add_reset(np.zeros(3))
    join_all(run_threads(lambda t: [step_of(rec, t, i) for i in range(steps)], n_threads))
    started = time.monotonic()
    rec.close()
    assert time.monotonic() - started < CLOSE_TIMEOUT_S
    stats = rec.stats()
    assert stats["broken"] is None and stats["records_dropped"] == 0 and stats["records_lost"] == 0
    assert stats["records_sent"] == n_threads * steps + 1 and stats["steps_committed"] == n_threads * steps
    counters = read_pairs(tmp_path)
    assert {t: c for t, c in counters.items()} == {t: list(range(steps)) for t in range(n_threads)}  # none lost, in order


def test_resets_from_other_threads_start_new_episodes_between_whole_steps(tmp_path, interleaved):
    """Pairs of calls are not kept together: a reset of one thread lands between another's steps; each record is whole."""
    rec = envrec.TraceRecorder(tmp_path, OBS, ACT, close_timeout_s=CLOSE_TIMEOUT_S)
    rec.add_reset(np.zeros(3))

    def work(t: int) -> None:
        for i in range(600):
            if t == 0 and i % 50 == 0:
                rec.add_reset(np.full(3, -1.0))
            else:
                step_of(rec, t, i)

    join_all(run_threads(work, 4))
    rec.close()
    counters = read_pairs(tmp_path)
    assert counters[0] == [i for i in range(600) if i % 50] and all(counters[t] == list(range(600)) for t in (1, 2, 3))
    episodes = list(envrec.TraceReader(tmp_path))
    assert len(episodes) == 13 and rec.stats()["episodes_started"] == 13
    assert all(ep.observations[0][0] == -1.0 for ep in episodes[1:])


def test_close_from_another_thread_mid_stream(tmp_path, interleaved):
    """Steps before close are all recorded; after it every thread's next call raises ClosedError; nothing is lost uncounted."""
    rec = envrec.TraceRecorder(tmp_path, OBS, ACT, close_timeout_s=CLOSE_TIMEOUT_S)
    rec.add_reset(np.zeros(3))
    done: dict[int, int] = {}
    errors: dict[int, BaseException] = {}

    def work(t: int) -> None:
        i = 0
        try:
            while True:
                step_of(rec, t, i)
                i += 1
        except envrec.ClosedError as exc:
            errors[t] = exc
        finally:
            done[t] = i

    threads = run_threads(work, 4)
    time.sleep(0.3)
    started = time.monotonic()
    rec.close()
    took = time.monotonic() - started
    join_all(threads)
    assert took < CLOSE_TIMEOUT_S, f"close() took {took:.1f} s"
    assert set(errors) == {0, 1, 2, 3} and all("closed" in str(e) for e in errors.values())
    assert all(done[t] > 0 for t in done), done
    counters = read_pairs(tmp_path)
    assert {t: c for t, c in counters.items()} == {t: list(range(done[t])) for t in range(4)}
    stats = rec.stats()
    assert stats["steps_committed"] == sum(done.values()) and stats["records_dropped"] == 0


@pytest.mark.parametrize("worker", ["slow", pytest.param("hung", marks=pytest.mark.slow)])
def test_close_from_another_thread_ends_a_wait_for_room(tmp_path, worker):
    """A thread blocked on a full ring: a live worker gives it room and its step is kept; a hung one's wait is refused
    after the grace (ClosedError there, counted nowhere as sent) and close still returns within its bounds."""
    fault = FaultSpec(sleep_per_record_s=0.02) if worker == "slow" else FaultSpec(at="record", after=3, how="hang")
    rec = envrec.TraceRecorder(tmp_path, OBS, ACT, ring_bytes=4096, faults=fault, hang_timeout_s=None, close_timeout_s=5.0)
    rec.add_reset(np.zeros(3))
    outcome: dict[str, object] = {}

    def work(_t: int) -> None:
        i = 0
        try:
            while True:
                step_of(rec, 0, i)
                i += 1
        except envrec.ClosedError as exc:
            outcome["error"] = exc
        outcome["steps"] = i

    threads = run_threads(work, 1)
    assert rec._stream.ring.used() > 0 and wait_full(rec)
    started = time.monotonic()
    rec.close()
    took = time.monotonic() - started
    join_all(threads)
    assert isinstance(outcome["error"], envrec.ClosedError)
    stats = rec.stats()
    sent = stats["records_sent"] - 1  # the reset
    assert sent == outcome["steps"] and stats["records_dropped"] == 0
    if worker == "slow":
        assert took < 5.0 and "closed" in str(outcome["error"])  # the ring's ~40 records drained, no grace needed
        assert stats["broken"] is None and read_pairs(tmp_path)[0] == list(range(sent))
    else:
        assert "this record was not written" in str(outcome["error"])
        assert took < CLOSE_GRACE_S + 5.0 + 5.0  # the grace, close_timeout_s, the kill's own grace
        assert stats["broken"] is not None and stats["records_lost"] > 0  # what the hung worker never took, counted


def wait_full(rec, timeout_s: float = 10.0) -> bool:
    """Until the ring is nearly full (the writer waits for room)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if rec._stream.ring.used() > rec._stream.ring.capacity - 512:
            return True
        time.sleep(0.01)
    return False


# -- video: the recorder and the wrapper ----------------------------------------------------------------------------

COLORS = (0, 80, 160, 240)  # one solid grey per thread: a torn frame would hold two


def test_frames_of_several_threads_are_each_whole_in_one_clip(tmp_path, interleaved):
    frames = 60
    rec = envrec.VideoRecorder(tmp_path, fps=25, close_timeout_s=CLOSE_TIMEOUT_S)
    rec.start_clip("mixed")
    pictures = [np.full((32, 32, 3), c, np.uint8) for c in COLORS]
    join_all(run_threads(lambda t: [rec.add_frame(pictures[t], i) for i in range(frames)], len(COLORS)))
    rec.close()
    stats = rec.stats()
    assert stats["frames_sent"] == stats["frames_written"] == frames * len(COLORS) and stats["frames_dropped"] == 0
    decoded = decode(tmp_path / "mixed.mp4", 32, 32).astype(int)
    assert len(decoded) == frames * len(COLORS)
    spread = decoded.max(axis=(1, 2, 3)) - decoded.min(axis=(1, 2, 3))
    assert spread.max() < 40, "a frame holds pixels of two threads' frames"
    nearest = np.abs(decoded.mean(axis=(1, 2, 3))[:, None] - np.array(COLORS)[None, :]).argmin(axis=1)
    assert np.bincount(nearest, minlength=len(COLORS)).tolist() == [frames] * len(COLORS)


class CounterEnv(gym.Env):
    """Stateless: the observation, reward and picture are made from the action alone, so threads may share it."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 25}  # noqa: RUF012  (Gymnasium's class-level dict)

    def __init__(self) -> None:
        self.observation_space, self.action_space, self.render_mode = OBS, ACT, "rgb_array"

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3), {}

    def step(self, action):
        t, i = int(action[0]), int(action[1])
        return np.array([t, i, t * 1000 + i], float), float(t * 1000 + i), False, False, {}

    def render(self):
        return np.zeros((16, 16, 3), np.uint8)


def test_record_trace_stepped_from_threads_then_closed_from_another(tmp_path, interleaved):
    env = envrec.RecordTrace(CounterEnv(), tmp_path, close_timeout_s=CLOSE_TIMEOUT_S)
    env.reset()
    done: dict[int, int] = {}

    def work(t: int) -> None:
        i = 0
        try:
            while True:
                env.step(np.array([t, i], float))
                i += 1
        except envrec.ClosedError:
            done[t] = i

    threads = run_threads(work, 4)
    time.sleep(0.3)
    started = time.monotonic()
    env.close()
    assert time.monotonic() - started < CLOSE_TIMEOUT_S
    join_all(threads)
    assert sorted(done) == [0, 1, 2, 3] and min(done.values()) > 0  # every thread was told, none stopped silently
    assert dict(read_pairs(tmp_path)) == {t: list(range(done[t])) for t in range(4)}
    assert env.stats()["steps_committed"] == sum(done.values())


def test_record_video_stepped_from_threads_then_closed_from_another(tmp_path, interleaved):
    """Every frame the wrapper counted reaches the clip; close from another thread mid-stream ends the clip whole."""
    env = envrec.RecordVideo(CounterEnv(), str(tmp_path), step_trigger=lambda s: s == 0, close_timeout_s=CLOSE_TIMEOUT_S)
    env.reset()
    steps: dict[int, int] = {}
    stop = threading.Event()

    def work(t: int) -> None:
        i = 0
        try:
            while not stop.is_set():
                env.step(np.array([t, i], float))
                i += 1
        except envrec.ClosedError:
            pass  # as RecordTrace: every thread is told, none steps the closed env silently
        steps[t] = i

    threads = run_threads(work, 4)
    time.sleep(0.2)
    started = time.monotonic()
    env.close()
    assert time.monotonic() - started < CLOSE_TIMEOUT_S
    stop.set()
    join_all(threads)
    stats = env.stats()
    assert stats["frames_sent"] == stats["frames_written"] > 0 and stats["frames_dropped"] == 0
    assert stats["clips_finished"] == stats["clips_started"] == 1 and stats["broken"] is None
    assert 0 < env.step_id + 1 == sum(steps.values())  # a step after close began raised: counted nowhere
    assert stats["frames_written"] == env.step_id + 1  # a frame for each step counted, from step 0 on


# -- an info larger than the ring ------------------------------------------------------------------------------------


def test_an_info_larger_than_the_ring_keeps_its_step_and_is_marked_and_counted(tmp_path, caplog):
    big = np.ones(20_000, np.float64)  # 160 kB of info in a 64 kB ring
    with envrec.TraceRecorder(tmp_path, OBS, ACT, ring_bytes=1 << 16) as rec:
        rec.add_reset(np.zeros(3), {"frame": big, "note": "reset"})
        step_of(rec, 0, 0)
        rec.add_step(np.array([0, 1], float), np.array([0, 1, 1], float), 1.0, False, False, {"frame": big, "lives": 3})
        rec.add_step(np.array([0, 2], float), np.array([0, 2, 2], float), 2.0, False, False,
                     {f"k{i}": np.ones(1000) for i in range(20)})  # no single culprit: the largest go first
        rec.add_step(np.array([0, 3], float), np.array([0, 3, 3], float), 3.0, True, False, {"small": 1})
        stats = rec.stats()
    assert stats["infos_too_large"] == 3 and stats["records_dropped"] == 0
    assert sum("larger than the ring" in r.getMessage() for r in caplog.records) == 1  # a warning once
    ep = envrec.TraceReader(tmp_path)[0]
    assert ep.actions[:, 1].tolist() == [0, 1, 2, 3] and ep.rewards.tolist() == [0.0, 1.0, 2.0, 3.0]
    reset_info, _, step_info, many, last = ep.infos
    for info, kept in ((reset_info, {"note": "reset"}), (step_info, {"lives": 3})):
        marker = info.pop("frame")
        assert isinstance(marker, envrec.Unrepresentable) and marker.type == "numpy.ndarray"
        assert "too large for the ring: 160" in marker.repr and "ring_bytes=65536" in marker.repr and info == kept
    marked = [k for k, v in many.items() if isinstance(v, envrec.Unrepresentable)]
    assert len(many) == 20 and 0 < len(marked) < 20 and all(np.array_equal(v, np.ones(1000)) for k, v in many.items() if k not in marked)
    assert last == {"small": 1}
    (manifest,) = tmp_path.glob("*.manifest.json")
    assert json.loads(manifest.read_text())["stats"]["env_process"]["infos_too_large"] == 3


def test_an_observation_larger_than_the_ring_still_raises(tmp_path):
    """The step's own values cannot be marked: a Text observation too large is refused, the recording goes on."""
    with envrec.TraceRecorder(tmp_path, S.Text(100_000), S.Discrete(2), ring_bytes=8192) as rec:
        rec.add_reset("hello")
        with pytest.raises(envrec.RecordTooLargeError, match="ring_bytes"):
            rec.add_step(0, "x" * 20_000, 0.0, False, False, {"a": 1})
        assert rec.stats()["infos_too_large"] == 0


def test_a_vector_trace_recorded_from_threads_keeps_every_step_whole(tmp_path, interleaved):
    envs = gym.vector.SyncVectorEnv([CounterEnv, CounterEnv])
    rec = envrec.RecordVectorTrace(envs, tmp_path, close_timeout_s=CLOSE_TIMEOUT_S)
    rec.reset(seed=0)
    steps = 300

    def work(t: int) -> None:
        for i in range(steps):
            actions = np.array([[t, i], [t, i]], float)
            obs = np.array([[t, i, t * 1000 + i]] * 2, float)
            rec.record_step(actions, obs, np.full(2, t * 1000.0 + i), np.zeros(2, bool), np.zeros(2, bool), {})

    join_all(run_threads(work, 4))
    rec.close()
    for j in range(2):
        counters: dict[int, list[int]] = defaultdict(list)
        for ep in envrec.TraceReader(tmp_path, prefix=rec.prefix_of(j)):
            for action, obs, reward in zip(ep.actions, ep.observations[1:], ep.rewards, strict=True):
                t, i = int(action[0]), int(action[1])
                assert (obs[0], obs[1], obs[2], reward) == (t, i, t * 1000 + i, t * 1000 + i)
                counters[t].append(i)
        assert dict(counters) == {t: list(range(steps)) for t in range(4)}
