"""Image observations in the viewer wherever they are: stacked frames (``FrameStackObservation``'s ``KxHxW`` and
``KxHxWxC``) drawn as a strip of their frames, and image leaves of ``Dict``/``Tuple`` observations shown as images
while their other leaves are plotted; small arrays stay plots. The page itself: tests/test_viewer_images_browser.py.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from gymnasium import spaces as S

import envrec
from envrec.formats.schema import describe_space
from envrec.viewer import ViewerServer
from envrec.viewer.step_view import STRIP_GAP_PX, frame_strip, image_layout, image_leaves

from .test_viewer import get

pytestmark = pytest.mark.timeout(120)

U8 = np.uint8


def _box(shape, dtype=U8):
    return describe_space(S.Box(0, 255 if dtype == U8 else 1, shape, dtype))


@pytest.mark.parametrize(("shape", "dtype", "expected"), [
    # today's images: a frame, grey or colour
    ((210, 160), U8, (210, 160, 1, 1)),
    ((84, 84, 1), U8, (84, 84, 1, 1)),
    ((210, 160, 3), U8, (210, 160, 3, 1)),
    ((64, 64, 4), U8, (64, 64, 4, 1)),
    # stacked frames: FrameStackObservation of a grey frame, of a colour frame
    ((4, 84, 84), U8, (84, 84, 1, 4)),
    ((1, 84, 84), U8, (84, 84, 1, 1)),
    ((4, 84, 84, 3), U8, (84, 84, 3, 4)),
    ((2, 64, 48, 1), U8, (64, 48, 1, 2)),
    # not images: stay plots
    ((3, 3, 3), U8, None),  # a grid of values
    ((4, 4), U8, None),
    ((8,), U8, None),
    ((), U8, None),
    ((4, 84, 3), U8, None),  # a stack of 3-pixel-wide rows, not pictures
    ((4, 4, 84), U8, None),
    ((84, 84, 3), np.float32, None),  # pixels are uint8
    ((4, 84, 84), np.float32, None),
    ((4, 84, 84, 2), U8, None),  # two channels: no PNG colour type
    ((100, 84, 84), U8, None),  # a volume, not a stack: more frames than MAX_FRAMES
    ((2, 2, 84, 84), U8, None),
    ((1, 4, 84, 84, 3), U8, None),
])
def test_a_box_is_an_image_by_its_shape_and_dtype_alone(shape, dtype, expected):
    layout = image_layout(_box(shape, dtype))
    assert (None if layout is None else (layout["height"], layout["width"], layout["channels"], layout["frames"])) == expected


def test_other_spaces_and_damaged_specs_are_no_images():
    for spec in (describe_space(S.Discrete(3)), describe_space(S.MultiBinary([8, 8])), describe_space(S.Text(5)), None,
                 {"type": "Box", "dtype": "|u1", "shape": [84, -1]}, {"type": "Box", "dtype": "|u1", "shape": "84x84"},
                 {"type": "Dict", "spaces": "x"}):
        assert image_layout(spec) is None and image_leaves(spec) == [], spec


def test_image_leaves_are_found_in_dicts_and_tuples_numbered_as_the_plots_number_them():
    space = S.Dict({
        "a_pos": S.Box(-1, 1, (3,), np.float32),  # dims 0..2
        "b_note": S.Text(8),  # text: no dimensions
        "c_frames": S.Box(0, 255, (4, 12, 10), U8),  # dims 3..482
        "d_more": S.Tuple((S.Discrete(5), S.Box(0, 255, (12, 10, 3), U8), S.Box(0, 255, (3, 3, 3), U8))),
    })
    leaves = image_leaves(describe_space(space))
    assert [(i["leaf"], i["label"], i["dims"], i["frames"], i["png_width"], i["png_height"]) for i in leaves] == [
        (1, "c_frames", [3, 483], 4, 4 * 10 + 3 * STRIP_GAP_PX, 12),
        (3, "d_more.1", [484, 844], 1, 10, 12),
    ]
    assert image_leaves(_box((84, 84, 3)))[0]["label"] == "" and image_leaves(_box((4, 4))) == []


def test_a_stack_is_drawn_oldest_left_with_grey_gaps():
    frames = np.arange(3 * 6 * 5 * 4, dtype=U8).reshape(3, 6, 5, 4)
    strip = frame_strip(frames.reshape(-1), {"frames": 3, "height": 6, "width": 5, "channels": 4})
    assert strip.shape == (6, 3 * 5 + 2 * STRIP_GAP_PX, 4)
    for k in range(3):
        at = k * (5 + STRIP_GAP_PX)
        assert np.array_equal(strip[:, at:at + 5], frames[k])
    gap = strip[:, 5:5 + STRIP_GAP_PX]
    assert (gap[..., :3] == 128).all() and (gap[..., 3] == 255).all()  # opaque grey between frames
    with pytest.raises(ValueError, match="3x6x5x4 uint8"):
        frame_strip(frames.reshape(-1)[1:], {"frames": 3, "height": 6, "width": 5, "channels": 4})


def _decoded(body: bytes) -> np.ndarray:
    from PIL import Image  # an independent decoder

    return np.asarray(Image.open(io.BytesIO(body)))


def _strip(frames: np.ndarray) -> np.ndarray:
    """What a stack's PNG must decode to: its frames side by side, ``STRIP_GAP_PX`` grey columns apart."""
    gap = np.full((frames.shape[1], STRIP_GAP_PX, *frames.shape[3:]), 128, U8)
    return np.concatenate([p for f in frames for p in (gap, f)][1:], axis=1)


@pytest.fixture
def pictures(tmp_path):
    """A viewer of two recordings: ``stack`` (a 4x12x10 frame stack) and ``dict`` (a Dict with a stack of 2 RGB
    frames, a position, a text and an RGB view leaf), 3 steps each; the frames recorded, by recording."""
    rng = np.random.default_rng(3)
    stack = rng.integers(0, 256, (4, 4, 12, 10), dtype=U8)
    with envrec.TraceRecorder(tmp_path, S.Box(0, 255, (4, 12, 10), U8), S.Discrete(2), name_prefix="stack") as rec:
        rec.add_reset(stack[0])
        for t in range(1, 4):
            rec.add_step(0, stack[t], 0.0, t == 3, False)
    space = S.Dict({"frames": S.Box(0, 255, (2, 12, 10, 3), U8), "note": S.Text(8),
                    "pos": S.Box(-1, 1, (2,), np.float32), "view": S.Box(0, 255, (16, 8, 3), U8)})
    obs = [{"frames": rng.integers(0, 256, (2, 12, 10, 3), dtype=U8), "note": f"t{t}",
            "pos": np.array([t, -t], np.float32) / 4, "view": rng.integers(0, 256, (16, 8, 3), dtype=U8)} for t in range(4)]
    with envrec.TraceRecorder(tmp_path, space, S.Discrete(2), name_prefix="dict") as rec:
        rec.add_reset(obs[0])
        for t in range(1, 4):
            rec.add_step(1, obs[t], 1.0, t == 3, False)
    server = ViewerServer(tmp_path).start()
    get(server, "/api/index")
    yield server, stack, obs
    server.close()


def test_a_frame_stack_is_served_as_a_strip_of_its_frames_and_not_plotted(pictures):
    server, stack, _ = pictures
    doc = json.loads(get(server, "/api/episode?recording=stack&episode=0")[2])
    assert doc["images"] == [{"leaf": 0, "label": "", "dims": [0, 480], "height": 12, "width": 10, "channels": 1,
                              "frames": 4, "png_width": 46, "png_height": 12}]
    assert doc["series"]["observations"] == []
    for step in (0, 2, 3):
        status, headers, body = get(server, f"/api/observation.png?recording=stack&episode=0&step={step}")
        assert status == 200 and headers["Content-Type"] == "image/png"
        assert np.array_equal(_decoded(body), _strip(stack[step])), step


def test_dict_leaves_images_as_pngs_the_other_leaves_plotted(pictures):
    server, _, obs = pictures
    doc = json.loads(get(server, "/api/episode?recording=dict&episode=0")[2])
    assert [(i["leaf"], i["label"], i["frames"], i["channels"]) for i in doc["images"]] == [(0, "frames", 2, 3), (2, "view", 1, 3)]
    assert doc["image"] == doc["images"][0]
    plotted = doc["series"]["observations"]
    assert [o["label"] for o in plotted] == ["pos[0]", "pos[1]"] and [o["dim"] for o in plotted] == [720, 721]
    assert plotted[0]["min"] == [t / 4 for t in range(4)]
    for step in (1, 3):
        frames = get(server, f"/api/observation.png?recording=dict&episode=0&step={step}&leaf=0")[2]
        assert np.array_equal(_decoded(frames), _strip(obs[step]["frames"]))
        view = get(server, f"/api/observation.png?recording=dict&episode=0&step={step}&leaf=2")
        assert view[0] == 200 and np.array_equal(_decoded(view[2]), obs[step]["view"])
    first = get(server, "/api/observation.png?recording=dict&episode=0&step=1")[2]  # no leaf: the first image
    assert np.array_equal(_decoded(first), _strip(obs[1]["frames"]))
    status, _, body = get(server, "/api/observation.png?recording=dict&episode=0&step=1&leaf=1")  # pos: no image
    assert status == 404 and b"image leaves are [0, 2]" in body
    asked = json.loads(get(server, "/api/episode?recording=dict&episode=0&obs=5")[2])  # pixels asked for: plotted
    assert [o["dim"] for o in asked["series"]["observations"]] == [5]
