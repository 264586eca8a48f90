"""Units: how spaces are described and encoded, and how infos become strict JSON and back."""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest
from gymnasium import spaces as S

from envrec.errors import ConfigError, RecordError
from envrec.formats.infos import Unrepresentable, decode_json, encode_json, pack_info, unpack_info
from envrec.formats.schema import compile_flattener, describe_space, leaf_codecs, leaves


def encode(spec: dict, value) -> list[bytes]:
    """The bytes each leaf of ``value`` would occupy in a record."""
    out = []
    for codec, v in zip(leaf_codecs(spec, "obs"), compile_flattener(spec, "obs")(value), strict=True):
        if codec.size is None:
            out.append(codec.encode(v))
        else:
            buf = bytearray(codec.size)
            codec.put(v, memoryview(buf), 0)
            out.append(bytes(buf))
    return out


class UserThing:
    def __repr__(self) -> str:
        return "UserThing()"


def roundtrip(obj):
    text = json.dumps(encode_json(unpack_info(pack_info(obj))), allow_nan=False)
    return decode_json(json.loads(text))


def test_plain_json_values_are_stored_as_they_are():
    info = {"a": 1, "b": [1.5, "x", None, True], "c": {"d": -2}}
    assert encode_json(info) == info
    assert roundtrip(info) == info


def test_non_finite_floats_keep_their_exact_bits_and_json_stays_strict():
    payload_nan = struct.unpack("<d", struct.pack("<Q", 0x7FF8_0000_DEAD_BEEF))[0]
    out = roundtrip({"n": payload_nan, "i": math.inf, "m": -math.inf})
    assert struct.pack("<d", out["n"]) == struct.pack("<d", payload_nan)
    assert out["i"] == math.inf and out["m"] == -math.inf


def test_numpy_scalars_and_arrays_keep_dtype_shape_and_bits():
    info = {
        "f32": np.float32(np.nan),
        "i8": np.int8(-3),
        "b": np.bool_(True),
        "arr": np.arange(6, dtype=">i4").reshape(2, 3),
        "nc": np.arange(10, dtype=np.float64)[::3],
    }
    out = roundtrip(info)
    assert isinstance(out["f32"], np.float32) and np.isnan(out["f32"])
    assert out["i8"] == -3 and out["i8"].dtype == np.int8
    assert out["b"] == True and out["b"].dtype == np.bool_
    assert out["arr"].dtype == np.dtype("<i4") and out["arr"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert out["nc"].tolist() == [0.0, 3.0, 6.0, 9.0]


def test_tuples_non_string_keys_bytes_and_a_users_own_type_key():
    info = {"t": (1, (2, "3")), 5: "five", (1, 2): "pair", "raw": b"\x00\xff", "u": {"__type": "mine"}}
    out = roundtrip(info)
    assert out == info


def test_objects_the_worker_could_not_load_become_tagged_reprs():
    out = roundtrip({"f": lambda x: x, "u": UserThing(), "objarr": np.array([UserThing()], dtype=object)})
    assert out["u"] == Unrepresentable(f"{__name__}.UserThing", "UserThing()")
    assert isinstance(out["f"], Unrepresentable) and "lambda" in out["f"].repr
    assert isinstance(out["objarr"], Unrepresentable)


def test_empty_info_costs_no_bytes():
    assert pack_info({}) == b"" and unpack_info(b"") == {}


def test_space_specs_and_leaves():
    space = S.Dict({"img": S.Box(0, 255, (2, 2, 3), np.uint8), "t": S.Tuple((S.Discrete(3), S.Text(5)))})
    spec = describe_space(space)
    json.dumps(spec, allow_nan=False)
    lv = leaves(spec)
    assert [(leaf.path, leaf.kind, leaf.dtype, leaf.shape) for leaf in lv] == [
        (("img",), "array", "|u1", (2, 2, 3)),
        (("t", 0), "array", "<i8", ()),
        (("t", 1), "text", "", ()),
    ]


def test_big_endian_box_is_stored_little_endian():
    spec = describe_space(S.Box(0, 1, (2,), np.dtype(">f8")))
    out = encode(spec, np.array([1.0, 2.0], dtype=">f8"))
    assert spec["dtype"] == "<f8" and out == [np.array([1.0, 2.0], "<f8").tobytes()]


@pytest.mark.parametrize(
    "space, value, message",
    [
        (S.Dict({"a": S.Discrete(2)}), {"b": 1}, r"obs: expected a dict with keys \['a'\]"),
        (S.Dict({"a": S.Discrete(2)}), {"a": 1, "z": 2}, r"unexpected keys \['z'\]"),
        (S.Tuple((S.Discrete(2), S.Discrete(2))), (1,), "expected a tuple of 2 items"),
        (S.Discrete(2), "1", "expected an integer"),
        (S.Discrete(2), 2**70, "does not fit"),
        (S.Text(4), 5, "expected a str"),
        (S.Dict({"p": S.Box(0, 1, (2,), np.float32)}), {"p": np.zeros(3, np.float32)}, r"obs\['p'\]: expected a float32"),
    ],
)
def test_encoder_errors_name_the_field(space, value, message):
    with pytest.raises(RecordError, match=message):
        encode(describe_space(space), value)


def test_unsupported_spaces_name_what_is_supported():
    with pytest.raises(ConfigError, match="supported: Box"):
        describe_space(S.Graph(S.Box(0, 1, (2,)), None))
