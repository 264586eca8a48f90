"""envrec view in a real headless browser (Playwright driving Debian's Chromium).

The index lists the episodes; an episode page plays its clip, the plot
cursor follows the video, a click on a plot seeks the video, nothing is
logged as an error and no request leaves 127.0.0.1. The pages run under the
viewer's Content-Security-Policy (no ``eval``), so waits are given as
functions, which Playwright calls without evaluating a string. Needs ``playwright``
(the test extra) and ``/usr/bin/chromium`` (``.ci/run`` installs it with
apt-get); outside CI a machine without them skips with the reason printed,
under ``CI=true`` the test fails instead. ``ENVREC_VIEWER_SCREENSHOT=FILE``
saves the episode page (``docs/viewer.png`` was made so).
"""

from __future__ import annotations

import os
import shutil
from urllib.parse import urlsplit

import gymnasium as gym
import pytest

import envrec
from envrec.viewer import ViewerServer

from .support.episodes import record_cartpole, run_episodes

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# As root in a container, with no network: no sandbox, and none of Chromium's own connections.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--autoplay-policy=no-user-gesture-required"]
FPS = 10  # slow enough that a short CartPole episode plays for seconds


def _browser_or_skip():
    missing = []
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing.append("the playwright package (pip install '.[test]')")
        sync_playwright = None
    if not os.path.exists(CHROMIUM):
        missing.append("chromium (apt-get install chromium)")
    if missing:
        reason = f"the viewer's browser test needs {' and '.join(missing)}"
        if os.environ.get("CI"):
            pytest.fail(reason + ": .ci/run installs them, so under CI=true this is a failure")
        print(f"SKIPPED: {reason}")
        pytest.skip(reason)
    return sync_playwright


@pytest.fixture
def recording(tmp_path):
    env = gym.make("CartPole-v1", render_mode="rgb_array")
    env = envrec.RecordVideo(env, str(tmp_path), episode_trigger=lambda e: True, fps=FPS)
    env = envrec.RecordTrace(env, tmp_path, name_prefix="cartpole")
    run_episodes(env, 4, action_seed=3)
    env.close()
    episodes = list(envrec.TraceReader(tmp_path))
    server = ViewerServer(tmp_path).start()
    yield server, episodes
    server.close()


def test_episode_page_plays_the_clip_with_a_cursor_that_follows_and_seeks(recording):
    sync_playwright = _browser_or_skip()
    server, episodes = recording
    longest = max(episodes, key=lambda e: e.length)
    errors, hosts = [], set()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1100, "height": 1300})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: hosts.add(urlsplit(r.url).hostname))

        page.goto(server.url)
        page.wait_for_selector("body[data-loaded='1']")
        rows = page.locator("#episodes tbody tr")
        assert rows.count() == len(episodes)
        page.click("#episodes th[data-key='length']")
        page.click("#episodes th[data-key='length']")  # descending: the longest first
        page.wait_for_selector("body[data-episodes-sort='-length']")  # sorted by the server: the page is drawn again
        assert rows.first.get_attribute("data-episode") == str(longest.episode_id)

        rows.first.locator("a").click()
        page.wait_for_selector("body[data-loaded='1']")
        assert page.locator("#summary").inner_text().startswith(f"{longest.length} steps")
        assert page.locator("canvas.plot").count() >= 2 + 1 + 4  # reward, return, action, 4 observation dims
        page.wait_for_function("() => document.getElementById('player').readyState >= 2")
        page.evaluate("document.getElementById('player').play()")
        page.wait_for_function("() => document.getElementById('player').currentTime > 0.8", timeout=15_000)
        first = page.evaluate("[document.getElementById('player').currentTime, Number(document.body.dataset.cursorStep)]")
        page.wait_for_timeout(600)
        second = page.evaluate("[document.getElementById('player').currentTime, Number(document.body.dataset.cursorStep)]")
        assert second[0] > first[0] and second[1] > first[1]  # the video plays, the cursor follows
        for t, step in (first, second):
            assert abs(step - int(t * FPS)) <= 2, (t, step)
        page.evaluate("document.getElementById('player').pause()")

        target = longest.length // 3
        plot = page.locator("canvas.plot").first
        box = plot.bounding_box()
        x = 1 + target / longest.length * (box["width"] - 2)
        plot.click(position={"x": x, "y": box["height"] / 2})
        page.wait_for_function(f"() => Math.abs(document.getElementById('player').currentTime - {(target + 0.5) / FPS}) < 0.05")
        assert abs(int(page.evaluate("document.body.dataset.cursorStep")) - target) <= 1
        cursor_x = float(plot.get_attribute("data-cursor-x"))
        assert abs(cursor_x - x) <= 2 * box["width"] / longest.length + 1

        if os.environ.get("ENVREC_VIEWER_SCREENSHOT"):
            page.evaluate(f"document.getElementById('player').currentTime = {(longest.length * 0.6 + 0.5) / FPS}")
            page.wait_for_timeout(500)
            page.screenshot(path=os.environ["ENVREC_VIEWER_SCREENSHOT"], full_page=True)
        browser.close()
    assert not errors, errors
    assert hosts == {"127.0.0.1"}, hosts


def test_ansi_clip_plays_as_text_synced_with_the_plots(tmp_path):
    sync_playwright = _browser_or_skip()
    env = gym.make("FrozenLake-v1", render_mode="ansi", is_slippery=False)
    env = envrec.RecordVideo(env, str(tmp_path), episode_trigger=lambda e: True, fps=FPS)
    env = envrec.RecordTrace(env, tmp_path, name_prefix="lake")
    env.reset(seed=0)
    for action in (2, 2, 1, 1, 1, 2):  # right, right, down, down, down, right: the goal in six steps
        env.step(action)
    env.close()
    server = ViewerServer(tmp_path).start()
    errors = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(server.url + "episode?recording=lake&episode=0")
            page.wait_for_selector("body[data-loaded='1']")
            page.wait_for_function("() => document.getElementById('cast') && document.getElementById('cast').textContent.includes('F')")
            start = page.locator("#cast").inner_text()
            page.click("#cast-play")
            page.wait_for_function("() => Number(document.body.dataset.cursorStep) >= 3", timeout=10_000)
            assert page.locator("#cast").inner_text() != start  # the agent moved on the board
            page.click("#cast-play")  # pause
            plot = page.locator("canvas.plot").first
            box = plot.bounding_box()
            plot.click(position={"x": 1 + 2 / 6 * (box["width"] - 2), "y": box["height"] / 2})
            page.wait_for_function("() => document.body.dataset.cursorStep === '2'")
            browser.close()
    finally:
        server.close()
    assert not errors, errors


def _script(tag: str) -> str:
    """Script that, if it ever ran on the viewer's origin, would say so in a request and on the console."""
    return f"fetch('/api/pwned-{tag}'); console.log('PWNED {tag}'); document.title = 'PWNED {tag}';"


def _crafted_folder(folder) -> list[str]:
    """A real recording plus what a stranger's folder may hold: pages posing as clips, a scripted SVG, markup in names
    and in a verdict file. Episode 3 has no clip."""
    import json

    from envrec.replay import Verdict
    from envrec.replay.verdicts import write_verdicts

    record_cartpole(folder, 4, video=lambda e: e == 2, name_prefix="cp")
    page = lambda tag: f"<!doctype html><html><body><script>{_script(tag)}</script></body></html>"
    files = {
        "evil.html": page("html"),
        "evil.svg": f'<svg xmlns="http://www.w3.org/2000/svg"><script>{_script("svg")}</script></svg>',
        "evil.mp4": page("mp4"),
        "evil.cast": page("cast"),
        "evil.xml": f'<html xmlns="http://www.w3.org/1999/xhtml"><script>{_script("xml")}</script></html>',
    }
    for name, text in files.items():
        (folder / name).write_text(text)
    markup = "<img src=x onerror=\"" + _script("markup") + "\">"
    for episode, video in ((0, "evil.html"), (1, "evil.mp4")):  # clip metadata naming the pages as the episodes' clips
        meta = {"version": 1, "name": f"{markup}-episode-{episode}", "path": video, "content_type": "video/mp4",
                "episode_id": episode, "fps": 30, "frames_written": 3, "broken": False, "reason": markup}
        (folder / f"crafted-{episode}.meta.json").write_text(json.dumps(meta))
    write_verdicts(folder, "cp", [Verdict("cp", 2, 2, "reproduced", steps=9, start="seed"),
                                  Verdict("cp", 3, 3, "cannot_replay", reason=markup)], atol=0.0, infos=False)
    manifest = folder / "cp.manifest.json"
    doc = json.loads(manifest.read_text())
    doc["env_id"] = markup
    manifest.write_text(json.dumps(doc))
    return [f"/files/{name}" for name in files]


def test_a_crafted_folder_runs_nothing_on_the_viewers_origin(tmp_path):
    sync_playwright = _browser_or_skip()
    from playwright.sync_api import Error as PlaywrightError

    urls = _crafted_folder(tmp_path)
    server = ViewerServer(tmp_path).start()
    requests, consoles, dialogs, titles = [], [], [], []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            context = browser.new_context(accept_downloads=False)
            context.on("request", lambda r: requests.append(urlsplit(r.url).path))
            page = context.new_page()
            page.on("console", lambda m: consoles.append(m.text))
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(server.url)
            page.wait_for_selector("body[data-loaded='1']")
            assert page.locator("#recordings tbody td", has_text="<img").count() == 1  # shown as text, not markup
            marks = {r.get_attribute("data-episode"): r.locator("td.verdict").inner_text() for r in page.locator("#episodes tbody tr").all()}
            assert marks == {"0": "", "1": "", "2": "reproduced", "3": "cannot replay"}
            page.goto(f"{server.url}episode?recording=cp&episode=3")
            page.wait_for_selector("body[data-loaded='1']")
            assert page.locator("#render-command").inner_text() == f"envrec render {tmp_path} --episodes 3"
            assert page.locator("#verdict-text").inner_text().startswith("verify: cannot replay: <img src=x onerror=")
            page.goto(server.url)
            page.wait_for_selector("body[data-loaded='1']")
            links = [a.get_attribute("href") for a in page.locator("#clips a").all()]
            assert "/files/evil.html" in links and "/files/evil.mp4" in links
            for url in [*links, *urls, "/episode?recording=cp&episode=0", "/episode?recording=cp&episode=1"]:
                try:
                    page.goto(server.url.rstrip("/") + url)
                except PlaywrightError:
                    pass  # a download (the .cast) or an aborted media load: nothing rendered
                page.wait_for_timeout(300)
                titles.append(page.title())
            browser.close()
    finally:
        server.close()
    assert not [r for r in requests if "pwned" in r], requests
    assert not [c for c in consoles if "PWNED" in c] and not dialogs, consoles
    assert not [t for t in titles if "PWNED" in t], titles
    assert server.refused["type"] >= 4  # .html twice (the index's link and directly), .svg, .xml
    assert "/files/evil.mp4" in requests  # the page-posing-as-a-clip was fetched, served as a video: and ran nothing


def test_a_clip_of_a_long_episode_whose_first_parts_were_evicted_stays_synced(tmp_path):
    """The plots of an endless episode start at its first kept step; frame f of its clip (from the reset) is
    still observation f: playing and seeking land on the same step number in the video and the plots."""
    from envrec.bench.variants import FrameEnv

    sync_playwright = _browser_or_skip()
    env = envrec.RecordVideo(FrameEnv(32, 32, length=None, frames="game"), str(tmp_path), episode_trigger=lambda e: e == 0,
                             fps=FPS)
    env = envrec.RecordTrace(env, tmp_path, name_prefix="fr", batch_bytes=20_000, max_bytes=150_000,
                             commit_interval=None, compression=None)  # raw frames: the budget must evict
    env.reset(seed=1)
    for _ in range(300):
        env.step(0)
    env.reset(seed=2)  # ends episode 0 (and its clip)
    env.close()
    ep = envrec.TraceReader(tmp_path)[0]
    assert ep.first_step > 100 and len(ep.parts) > 1
    server = ViewerServer(tmp_path).start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1100, "height": 1300})
            page.goto(f"{server.url}episode?recording=fr&episode=0")
            page.wait_for_selector("body[data-loaded='1']")
            assert page.locator("#summary").inner_text().startswith(f"{ep.length} steps (steps {ep.first_step}..299")
            page.wait_for_function("() => document.getElementById('player').readyState >= 2")
            at = ep.first_step + 20
            page.evaluate(f"document.getElementById('player').currentTime = {(at + 0.5) / FPS}")
            page.wait_for_function(f"() => Number(document.body.dataset.cursorStep) === {at}")
            target = ep.first_step + ep.length // 2
            plot = page.locator("canvas.plot").first
            box = plot.bounding_box()
            plot.click(position={"x": 1 + (target - ep.first_step) / ep.length * (box["width"] - 2), "y": box["height"] / 2})
            page.wait_for_function(f"() => Math.abs(document.getElementById('player').currentTime - {(target + 0.5) / FPS}) < 0.15")
            assert abs(int(page.evaluate("document.body.dataset.cursorStep")) - target) <= 1
            browser.close()
    finally:
        server.close()
