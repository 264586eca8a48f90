"""The episode page in a real headless browser (Playwright driving Debian's Chromium) on a short real ALE Pong recording.

The 160x210 clip is shown scaled up by a whole factor, the observation under
the cursor beside it as an image (the recorded pixels), the Discrete(6)
action as a step line labelled with ALE's action names, "not seeded" for an
unseeded episode, the values and info under the cursor; a deep link seeks,
the keys step, and two episodes side by side share one cursor. Skips (saying
why) without playwright or chromium outside CI, fails under ``CI=true``, as
tests/test_viewer_browser.py does. ``ENVREC_VIEWER_EPISODE_SCREENSHOT=FILE``
saves the Pong page (``docs/viewer-episode.png`` was made so).
"""

from __future__ import annotations

import os
import shutil
from urllib.parse import urlsplit

import pytest

from envrec.viewer import ViewerServer

from .support.pong import PONG_FPS, PONG_STEPS, record_pong
from .test_viewer_browser import CHROMIUM, CHROMIUM_ARGS, _browser_or_skip

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

NAMES = ["NOOP", "FIRE", "RIGHT", "LEFT", "RIGHTFIRE", "LEFTFIRE"]
BLUE = "(d) => d[2] > 140 && d[0] < 90"  # the first series' colour (#1a5fb4), not the grid's grey


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pong")
    return folder, record_pong(folder)


@pytest.fixture
def browser_page(recorded, tmp_path):
    """(page, server, episodes, errors, hosts): a Chromium page on a viewer of a copy of the Pong recording."""
    sync_playwright = _browser_or_skip()
    folder = tmp_path / "rec"
    shutil.copytree(recorded[0], folder)
    server = ViewerServer(folder).start()
    errors, hosts = [], set()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1400})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: hosts.add(urlsplit(r.url).hostname))
            yield page, server, recorded[1], errors, hosts
            browser.close()
    finally:
        server.close()
    assert not errors, errors
    assert hosts == {"127.0.0.1"}, hosts


def _open(page, server, address):
    page.goto(server.url + address)
    page.wait_for_selector("body[data-loaded='1']")
    page.wait_for_function("() => [...document.querySelectorAll('video')].every((v) => v.readyState >= 2)")


def _at(page, step, pane=""):
    """Wait until the cursor, the readout and the observation image (of pane "" or "-2") all show ``step``."""
    page.wait_for_function(f"""() => document.body.dataset.cursorStep === '{step}'
        && document.getElementById('readout{pane}').dataset.step === '{step}'
        && document.getElementById('obs-image{pane}').dataset.step === '{step}'""")


def _pixels(page, points):
    """The RGB of the observation image, as the browser decoded it, at (row, col) points."""
    return page.evaluate("""(points) => {
        const img = document.getElementById('obs-image'), c = document.createElement('canvas');
        c.width = img.naturalWidth; c.height = img.naturalHeight;
        const ctx = c.getContext('2d'); ctx.drawImage(img, 0, 0);
        return points.map(([r, col]) => Array.from(ctx.getImageData(col, r, 1, 1).data.slice(0, 3)));
    }""", points)


def test_pong_clip_is_scaled_up_beside_its_observation_and_actions_are_named_steps(browser_page):
    page, server, episodes, _, _ = browser_page
    ep = episodes[1]
    _open(page, server, "episode?recording=pong&episode=1")
    summary = page.locator("#summary").inner_text()
    assert summary.startswith(f"{PONG_STEPS} steps") and "not seeded" in summary and "seed ;" not in summary
    size = page.evaluate("(() => { const v = document.getElementById('player'); return [v.videoWidth, v.videoHeight, "
                         "v.clientWidth, v.clientHeight, getComputedStyle(v).imageRendering]; })()")
    assert size[:2] == [160, 210] and size[3] >= 480 and size[3] % 210 == 0 and size[2] == size[3] // 210 * 160, size
    assert size[4] == "pixelated"
    assert page.locator("canvas.plot[data-label^='observation']").count() == 0  # no pixels plotted as lines

    page.locator("canvas.plot").first.click(position={"x": 5, "y": 40})  # then the keys: to step 23
    page.keyboard.press("Shift+ArrowRight")
    page.keyboard.press("Shift+ArrowRight")
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    _at(page, 23)
    img = page.evaluate("(() => { const i = document.getElementById('obs-image'); return [i.naturalWidth, i.naturalHeight, "
                        "i.clientWidth, i.clientHeight, getComputedStyle(i).imageRendering]; })()")
    assert img == [160, 210, size[2], size[3], "pixelated"], img
    points = [(r, c) for r in (0, 30, 100, 150, 195) for c in (0, 20, 80, 140, 159)]
    frame = ep.observations[23]
    assert _pixels(page, points) == [frame[r, c].tolist() for r, c in points]
    readout = page.locator("#readout").inner_text()
    a = int(ep.actions[22])
    assert readout.startswith("step 23 · reward 0") and f"action {NAMES[a]} ({a})" in readout, readout
    info = {r.locator("th").inner_text(): r.locator("td").inner_text() for r in page.locator("#step-info tr").all()}
    assert info == {k: repr(v) for k, v in ep.infos[23].items()}

    action = page.locator("canvas.plot[data-label='action']")
    assert action.get_attribute("data-kind") == "steps"
    assert page.locator(".ylabels span").all_inner_texts() == NAMES
    assert page.locator("canvas.axis").get_attribute("data-ticks").split(",")[0] == "0"
    _assert_step_line(page, ep)
    if os.environ.get("ENVREC_VIEWER_EPISODE_SCREENSHOT"):
        page.wait_for_function("() => { const v = document.getElementById('player'); return !v.seeking && v.readyState >= 2; }")
        page.screenshot(path=os.environ["ENVREC_VIEWER_EPISODE_SCREENSHOT"], full_page=True)
    _open(page, server, "episode?recording=pong&episode=0")
    assert "seed 3;" in page.locator("#summary").inner_text()


def _assert_step_line(page, ep):
    """Halfway between the x of two actions the line is flat at the first one's row (step-after), where a zig-zag
    line drawn between them would cross the rows in between."""
    rows = page.evaluate("JSON.parse(document.querySelector('canvas[data-label=action]').dataset.levelY)")
    changes = [t for t in range(PONG_STEPS - 1) if abs(int(ep.actions[t]) - int(ep.actions[t + 1])) >= 2]
    assert len(changes) >= 3, changes
    columns = page.evaluate(f"""(changes) => {{
        const c = document.querySelector('canvas[data-label=action]'), ctx = c.getContext('2d'), blue = {BLUE};
        const px = (x) => 1 + x / {PONG_STEPS} * (c.width - 2);
        return changes.map((t) => {{
            const x = Math.round((px(t + 1) + px(t + 2)) / 2), col = ctx.getImageData(x, 0, 1, c.height).data, ys = [];
            for (let y = 0; y < c.height; y++) if (blue(col.slice(4 * y, 4 * y + 4))) ys.push(y);
            return ys;
        }});
    }}""", changes)
    for t, ys in zip(changes, columns, strict=True):
        level = rows[int(ep.actions[t])]
        assert ys and all(abs(y - level) <= 2 for y in ys), (t, level, ys)


def test_a_deep_link_seeks_and_the_keys_step_and_keep_it(browser_page):
    page, server, _, _, _ = browser_page
    _open(page, server, "episode?recording=pong&episode=1#step=17")
    _at(page, 17)

    def time_of_player():
        return page.evaluate("document.getElementById('player').currentTime")

    assert abs(time_of_player() - 17.5 / PONG_FPS) < 0.01
    page.keyboard.press("ArrowRight")
    _at(page, 18)
    page.wait_for_function("() => location.hash === '#step=18'")
    assert abs(time_of_player() - 18.5 / PONG_FPS) < 0.01 and page.evaluate("document.getElementById('player').paused")
    for key, step in (("Shift+ArrowRight", 28), ("ArrowLeft", 27), ("Shift+ArrowLeft", 17), ("End", PONG_STEPS), ("Home", 0)):
        page.keyboard.press(key)
        _at(page, step)
    page.wait_for_function("() => location.hash === '#step=0'")
    page.keyboard.press(" ")
    page.wait_for_function("() => Number(document.body.dataset.cursorStep) >= 5", timeout=15_000)  # it plays, the cursor follows
    page.keyboard.press(" ")
    assert page.evaluate("document.getElementById('player').paused")
    assert "Space" in page.locator("#help").inner_text() and "#step=K" in page.locator("#help").inner_text()

    page.wait_for_function("() => location.hash === '#step=' + document.body.dataset.cursorStep")
    page.reload()  # the address kept the step
    page.wait_for_selector("body[data-loaded='1']")
    kept = int(page.evaluate("location.hash").split("=")[1])
    assert kept >= 5 and page.evaluate("document.body.dataset.cursorStep") == str(kept)
    _open(page, server, "episode?recording=pong&episode=1#t=1.2")  # seconds of the clip
    _at(page, 12)
    _open(page, server, "episode#recording=pong&episode=0&step=9")  # the episode in the hash too
    _at(page, 9)
    assert "seed 3" in page.locator("#summary").inner_text()


def test_two_episodes_side_by_side_on_one_cursor(browser_page):
    page, server, episodes, errors, _ = browser_page
    _open(page, server, "episode?recording=pong&episode=1&compare=0#step=6")
    assert page.locator("video").count() == 2 and page.locator(".pane").count() == 2
    scales = [int(s) for s in page.locator("video").evaluate_all("(vs) => vs.map((v) => v.dataset.scale)")]
    assert all(s >= 2 for s in scales), scales
    assert "not seeded" in page.locator("#summary").inner_text() and "seed 3" in page.locator("#summary-2").inner_text()
    _at(page, 6)
    _at(page, 6, "-2")
    page.keyboard.press("Shift+ArrowRight")
    _at(page, 16)
    _at(page, 16, "-2")
    times = page.locator("video").evaluate_all("(vs) => vs.map((v) => v.currentTime)")
    assert all(abs(t - 16.5 / PONG_FPS) < 0.01 for t in times), times
    a = int(episodes[0].actions[15])
    assert f"action {NAMES[a]} ({a})" in page.locator("#readout-2").inner_text()
    plot = page.locator("#pane-2 canvas.plot").first  # a click on the other pane's plot moves both
    box = plot.bounding_box()
    plot.click(position={"x": 1 + 30 / PONG_STEPS * (box["width"] - 2), "y": box["height"] / 2})
    _at(page, 30)
    _at(page, 30, "-2")

    page.fill("#compare-with", "nope")
    page.click("#apply-compare")
    assert "RECORDING:EPISODE" in page.locator("#status").inner_text()
    page.fill("#compare-with", "pong:1")  # the picker: the same recording by name, episode 1 against itself
    page.click("#apply-compare")
    page.wait_for_url("**compare=pong%3A1**")
    page.wait_for_selector("body[data-loaded='1']")
    assert page.locator("#title").inner_text() == "pong, episode 1 compared with pong, episode 1"
    assert not errors, errors
    _open(page, server, "episode?recording=pong&episode=1&compare=99")  # not there: the page's own episode, alone
    assert page.locator("video").count() == 1 and "no episode 99" in page.locator("#status").inner_text()
    assert [e for e in errors if "404" in e] == errors and len(errors) == 1, errors  # the browser logs the 404 of its data
    errors.clear()
