"""What each option accepts, as data: one table per place options are defined, checked once, when a recorder is built.

An :class:`Accepts` is a predicate and the words for it. Tables map option
names to them; :func:`check_options` checks the values of a table's names
and raises ``ConfigError`` naming the first bad option, what it accepts and
what it got::

    TRACE_OPTIONS = {"batch_bytes": POSITIVE_INT, "on_batch_committed": optional(CALLABLE)}
    check_options("TraceRecorder", TRACE_OPTIONS, locals())

Booleans are ``True``/``False``: a string such as ``"no"`` (which is
truthy) is refused, and so are ``1`` and ``numpy.True_``. Integers are
Python ints, never bools or floats (``1.5`` bytes is refused, so is
``2.0``). Numbers are finite Python ints or floats (``numpy.float64`` is a
float), never bools or strings. Values end up in JSON files (manifests,
clip metadata), so numpy's other scalars are refused rather than carried
there: pass ``int(x)``.
Dataclasses of options check their fields the same way from each field's
``metadata["accepts"]`` (:func:`check_fields`).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

__all__ = [
    "BOOL",
    "CALLABLE",
    "FOLDER",
    "MAPPING",
    "NON_NEGATIVE_INT",
    "POSITIVE_INT",
    "POSITIVE_NUMBER",
    "STR",
    "Accepts",
    "accepts",
    "check_fields",
    "check_options",
    "import_named",
    "int_in",
    "number_in",
    "one_of",
    "optional",
    "seconds_from_env",
]


@dataclass(frozen=True)
class Accepts:
    """What an option accepts: ``test(value)`` is true for a good value; ``what`` says so in words."""

    what: str
    test: Callable[[Any], bool]

    def check(self, owner: str, name: str, value: Any) -> None:
        """``ConfigError`` naming ``owner``'s option ``name``, what it accepts and ``value``, unless ``value`` passes."""
        try:
            ok = self.test(value)
        except Exception:  # noqa: BLE001  (a value a predicate cannot even look at is a bad value)
            ok = False
        if not ok:
            raise ConfigError(f"{owner}: {name} must be {self.what}, not {value!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def int_in(lo: int | None = None, hi: int | None = None, what: str | None = None) -> Accepts:
    """An integer in ``[lo, hi]`` (either end open when None)."""
    if what is None:
        bounds = {(True, True): f" in [{lo}, {hi}]", (True, False): f" >= {lo}", (False, True): f" <= {hi}", (False, False): ""}
        what = "an integer" + bounds[lo is not None, hi is not None]
    return Accepts(what, lambda v: _is_int(v) and (lo is None or v >= lo) and (hi is None or v <= hi))


def number_in(lo: float, hi: float) -> Accepts:
    """A finite number (integer or float) in ``[lo, hi]``."""
    return Accepts(f"a number in [{lo:g}, {hi:g}]", lambda v: _is_number(v) and lo <= v <= hi)


def one_of(*choices: Any) -> Accepts:
    return Accepts(f"one of {', '.join(map(repr, choices))}", lambda v: isinstance(v, str) and v in choices)


def optional(inner: Accepts) -> Accepts:
    """``inner`` or None."""
    return Accepts(f"{inner.what} or None", lambda v: v is None or inner.test(v))


BOOL = Accepts("True or False", lambda v: isinstance(v, bool))
POSITIVE_INT = int_in(1, what="a positive integer")
NON_NEGATIVE_INT = int_in(0, what="an integer >= 0")
POSITIVE_NUMBER = Accepts("a positive number", lambda v: _is_number(v) and v > 0)
CALLABLE = Accepts("callable", callable)
STR = Accepts("a string", lambda v: isinstance(v, str))
MAPPING = Accepts("a dict", lambda v: isinstance(v, dict))
FOLDER = Accepts("a folder's path (a string or os.PathLike)", lambda v: isinstance(v, str | os.PathLike))


def check_options(owner: str, table: Mapping[str, Accepts], values: Mapping[str, Any]) -> None:
    """Check the value of every option of ``table`` that ``values`` holds (a signature's ``locals()``)."""
    for name, rule in table.items():
        if name in values:
            rule.check(owner, name, values[name])


def accepts(rule: Accepts) -> dict[str, Accepts]:
    """A dataclass field's metadata saying what it accepts: ``field(default=..., metadata=accepts(BOOL))``."""
    return {"accepts": rule}


def check_fields(obj: Any) -> None:
    """Check every field of the dataclass ``obj`` that says what it accepts (from ``__post_init__``)."""
    owner = type(obj).__name__
    for f in dataclasses.fields(obj):
        rule = f.metadata.get("accepts")
        if rule is not None:
            rule.check(owner, f.name, getattr(obj, f.name))


def import_named(text: Any, what: str) -> Any:
    """The object ``"module:qualname"`` names (``pkg.envs:make_env``, ``pkg.envs:Factory.create``), imported: an
    option that names code (``make=``, ``snapshot=``).

    Args:
        text: ``module:qualname``.
        what: the option, for messages (``"make"``).

    Raises:
        ConfigError: ``text`` is not of that form, its module does not import (whatever it raised), or it has
            no such attribute.
    """
    module_name, sep, qualname = text.partition(":") if isinstance(text, str) else ("", "", "")
    if not sep or not module_name or not qualname:
        raise ConfigError(f"{what}={text!r} is not module:qualname (e.g. mypackage.envs:make_env)")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # importing the user's code may raise anything)
        raise ConfigError(f"{what}={text!r}: cannot import {module_name!r}: {type(exc).__name__}: {exc}") from exc
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{what}={text!r}: {module_name!r} has no {qualname!r}") from None
    return obj



def seconds_from_env(name: str, default: float) -> float:
    """``$name`` when it holds a positive number of seconds, else ``default`` (a deadline a user may set)."""
    try:
        value = float(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if value > 0 else default
