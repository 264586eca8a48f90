"""Image observations on the episode page in a real headless browser (Playwright driving Debian's Chromium).

A real frame-stacked Atari recording (``ALE/Pong-v5`` through ``AtariPreprocessing`` and
``FrameStackObservation(4)``: 4x84x84 uint8) is shown as one image, its four frames side by side, oldest left, with
no observation plotted; a Dict observation with an image leaf shows the image and plots its other leaf. Skips
(saying why) without playwright or chromium outside CI, fails under ``CI=true``, as tests/test_viewer_browser.py
does.
"""

from __future__ import annotations

import shutil

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces as S

import envrec
from envrec.viewer import ViewerServer
from envrec.viewer.step_view import STRIP_GAP_PX

from .test_viewer_browser import CHROMIUM, CHROMIUM_ARGS, _browser_or_skip

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

STACKED_STEPS = 36  # steps of the frame-stacked Pong episode (max_episode_steps)
DICT_STEPS = 12


class _Radar(gym.Env):
    """A tiny env whose observation is a Dict: a 20x24 grey ``screen`` with a bright column at ``x``, and ``x``."""

    def __init__(self):
        self.observation_space = S.Dict({"screen": S.Box(0, 255, (20, 24), np.uint8), "x": S.Box(0, 23, (1,), np.float32)})
        self.action_space = S.Discrete(2)
        self.x = 0

    def _obs(self):
        screen = np.full((20, 24), 30, np.uint8)
        screen[:, self.x] = 250
        return {"screen": screen, "x": np.array([self.x], np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = 0
        return self._obs(), {}

    def step(self, action):
        self.x = min(23, self.x + 1 + int(action))
        return self._obs(), 1.0, self.x == 23, False, {}


def _record(folder) -> tuple[list, list]:
    """The frame-stacked Pong episode (prefix ``stacked``) and the Dict episode (prefix ``radar``), as read back."""
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", max_episode_steps=None)
    env = gym.wrappers.AtariPreprocessing(env, frame_skip=1)  # Pong-v5 skips frames already
    env = gym.wrappers.FrameStackObservation(env, 4)
    env = gym.wrappers.TimeLimit(env, STACKED_STEPS)  # outside: the reset's no-ops are not steps
    env = envrec.RecordTrace(env, folder, name_prefix="stacked")
    env.action_space.seed(1)
    for e in (env, envrec.RecordTrace(_Radar(), folder, name_prefix="radar")):
        e.reset(seed=2)
        done = False
        while not done:
            _, _, terminated, truncated, _ = e.step(e.action_space.sample())
            done = terminated or truncated
        e.close()
    return list(envrec.TraceReader(folder, prefix="stacked")), list(envrec.TraceReader(folder, prefix="radar"))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stacked")
    return folder, *_record(folder)


@pytest.fixture
def page_on(recorded, tmp_path):
    """(page, server, stacked episodes, radar episodes): a Chromium page on a viewer of a copy of the recordings."""
    sync_playwright = _browser_or_skip()
    folder = tmp_path / "rec"
    shutil.copytree(recorded[0], folder)
    server = ViewerServer(folder).start()
    errors: list[str] = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1300, "height": 1200})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            yield page, server, recorded[1], recorded[2]
            browser.close()
    finally:
        server.close()
    assert not errors, errors


def _open_at(page, server, address, step, images):
    page.goto(server.url + address + f"#step={step}")
    page.wait_for_selector("body[data-loaded='1']")
    checks = " && ".join(f"document.getElementById('{i}') && document.getElementById('{i}').dataset.step === '{step}'" for i in images)
    page.wait_for_function(f"() => document.body.dataset.cursorStep === '{step}' && {checks}")


def _pixels(page, image_id, points):
    """The RGB of an observation image as the browser decoded it, at (row, col) points; and its natural size."""
    return page.evaluate("""([id, points]) => {
        const img = document.getElementById(id), c = document.createElement('canvas');
        c.width = img.naturalWidth; c.height = img.naturalHeight;
        const ctx = c.getContext('2d'); ctx.drawImage(img, 0, 0);
        return [[img.naturalWidth, img.naturalHeight],
                points.map(([r, col]) => Array.from(ctx.getImageData(col, r, 1, 1).data.slice(0, 3)))];
    }""", [image_id, points])


def test_frame_stacked_atari_observations_show_as_a_strip_of_their_frames_not_plots(page_on):
    page, server, stacked, _ = page_on
    ep = stacked[0]
    assert ep.observations.shape == (STACKED_STEPS + 1, 4, 84, 84) and ep.observations.dtype == np.uint8
    _open_at(page, server, "episode?recording=stacked&episode=0", 9, ["obs-image"])
    assert page.locator("canvas.plot[data-label^='observation']").count() == 0  # 28,224 pixels: none plotted as lines
    assert page.locator("img.obs-image").count() == 1
    summary = page.locator("#summary").inner_text()
    assert "stack of 4 84x84x1 frames" in summary and "oldest left" in summary, summary
    caption = page.locator("figure.obs-box").inner_text()
    assert "observation 9" in caption and "4 stacked frames, oldest left, newest right" in caption, caption
    points = [(r, k * (84 + STRIP_GAP_PX) + c) for k in range(4) for r in (0, 20, 50, 83) for c in (0, 10, 42, 83)]
    size, got = _pixels(page, "obs-image", points)
    assert size == [4 * 84 + 3 * STRIP_GAP_PX, 84]
    frames = ep.observations[9]
    assert got == [[int(frames[c // (84 + STRIP_GAP_PX), r, c % (84 + STRIP_GAP_PX)])] * 3 for r, c in points]
    assert _pixels(page, "obs-image", [(40, 84)])[1] == [[128, 128, 128]]  # the gap between the first two frames
    assert not np.array_equal(frames[0], frames[3])  # the frames differ: the test can tell them apart
    scale = int(page.locator("#obs-image").get_attribute("data-scale"))
    assert scale >= 1 and page.evaluate("document.getElementById('obs-image').clientWidth") == size[0] * scale


def test_a_dict_observations_image_leaf_shows_as_an_image_its_other_leaf_as_a_plot(page_on):
    page, server, _, radar = page_on
    ep = radar[0]
    _open_at(page, server, "episode?recording=radar&episode=0", 3, ["obs-image"])
    assert page.locator("img.obs-image").count() == 1
    assert page.locator("canvas.plot[data-label^='observation']").evaluate_all("(cs) => cs.map((c) => c.dataset.label)") == [
        "observation x"]
    assert "screen is a 20x24x1 image" in page.locator("#summary").inner_text()
    assert "observation screen 3" in page.locator("figure.obs-box").inner_text()
    size, got = _pixels(page, "obs-image", [(5, c) for c in range(24)])
    assert size == [24, 20]
    assert got == [[int(v)] * 3 for v in ep.observations["screen"][3][5]]
    assert "obs x " in page.locator("#readout").inner_text()
