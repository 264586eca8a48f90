"""What a recording folder may cause when it is verified or rendered, and what it may not: "from a folder,
run nothing".

A folder can come from anyone (a download, a colleague's run, a shared disk), and every name in its
manifest and batches is data chosen by whoever wrote it: ``gym.make(spec)`` would call whatever its entry
points name with whatever kwargs it says (``"os:system"`` with ``{"command": ...}``), a snapshot name would
be imported, and a folder lying under ``sys.path[0]`` (the working directory of ``python -m envrec``, of a
script or of a notebook) is itself importable as a namespace package, so a name such as
``downloads.run1.evil:hook`` would run code planted in the folder. So replay resolves a folder's names
only as follows.

**A folder may name** (nothing is imported because of it):

* an env id this machine registers: Gymnasium's own, those of installed ``gymnasium.envs`` plugins, ALE's
  (``ale_py``, which envrec itself knows registers ``ALE/`` ids: ``envrec.env_ids``), and those the
  modules the user names register (``--import MODULE``, ``import_modules=``). Its recorded entry point
  must be the one registered for that id here. An id ``module:Id`` is made only when the user imported
  ``module`` (or a package above it) with ``--import``;
* wrappers (``additional_wrappers``) that are ``gymnasium.Wrapper`` classes, neither recording nor
  rendering, found in modules already loaded: Gymnasium's, the env's own package's, the user's
  ``--import`` modules'. They are looked up in ``sys.modules``, never imported;
* the snapshot hooks built into envrec, ``"ale"`` and ``"mujoco"``;
* kwargs for the env and its wrappers, and each episode's reset options, except those below.

**A folder may not** (the episode is ``cannot_replay``, its verdict says which name or kwarg and why):

* have any module imported: an entry point, a wrapper or an env id naming a module not loaded, a snapshot
  hook other than the built-in ones (the user names one with ``--snapshot module:object``);
* choose paths: a kwarg whose key names a file, path, folder, URL or XML (``xml_file``, ``model_path``,
  ``video_folder``) or whose string value looks like a path, a file or a ``module:object``
  (``/etc/passwd``, ``~/x``, ``a.xml``, ``pkg.mod:fn``), unless it is the registered default;
* choose allocation sizes: a number (or a list of them: a shape) far beyond the registered default of
  its kwarg (more than ``SIZE_FACTOR`` times it, and beyond ``SIZE_FLOOR``; a shape's product beyond
  ``CELLS_FLOOR``): ``FrameStackObservation(stack_size=200000000)`` would allocate gigabytes. Step limits
  (``STEP_LIMITS``) allocate nothing and pass.

The registered defaults are the registry's kwargs for the id, then the defaults in the signature of the
registered entry point (or of the wrapper class). The user widens this with ``--make module:function``
(their own code makes the env), ``--snapshot``, ``--import MODULE`` and ``--trust-kwargs`` (the recorded
kwargs and reset options used as they are); render's ``--env-kwargs`` replace recorded kwargs, which are
then not checked.

Python itself imports from ``sys.path[0]`` first: ``python -m envrec`` run with its working directory
*inside* an untrusted folder would import that folder's ``numpy.py``; the ``envrec`` console script does
not put the working directory on ``sys.path``.
"""

from __future__ import annotations

import importlib
import inspect
import math
import re
import shlex
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from ..env_ids import callable_name, is_module_name, load_env_namespace
from ..errors import ConfigError

__all__ = ["BUILT_IN_SNAPSHOTS", "CELLS_FLOOR", "SIZE_FACTOR", "SIZE_FLOOR", "STEP_LIMITS", "WRITING_WRAPPERS",
           "Refused", "Trust", "import_user_modules", "kwargs_refusal", "options_refusal", "recorded_env_id",
           "recorded_snapshot", "spec_refusal", "user_trust"]

# Gymnasium's wrappers that write files or open windows where their kwargs say: never made from a folder's spec.
WRITING_WRAPPERS = frozenset({"RecordVideo", "HumanRendering"})
BUILT_IN_SNAPSHOTS = ("ale", "mujoco")
SIZE_FLOOR = 4096  # a number a folder may give a kwarg with no larger default (a render width, a stack of frames)
SIZE_FACTOR = 16  # ... or up to this many times its registered default (HalfCheetah's 480-pixel width: 7680)
CELLS_FLOOR = SIZE_FLOOR * SIZE_FLOOR  # the product of a list of numbers (a shape) a folder may give
STEP_LIMITS = frozenset({"max_episode_steps", "max_num_frames_per_episode", "max_steps"})  # limits, not sizes
_PATH_WORDS = ("file", "filename", "path", "dir", "directory", "folder", "url", "uri", "xml", "root")
_FILE_LIKE = re.compile(r"(\.[A-Za-z][A-Za-z0-9]{0,5}$)|^[\w.]+:[\w.]+$")  # a.xml, x.tar.gz; pkg.mod:fn
_SHOWN = 60  # characters of a refused value quoted in a verdict
KWARGS_HINT = ("pass --trust-kwargs (trust_kwargs=True in Python) if you trust these recorded values, or give them "
               "yourself (render's --env-kwargs)")


@dataclass(frozen=True)
class Trust:
    """What the user trusts beyond what a folder may name (picklable: it travels to replay jobs).

    Attributes:
        import_modules: modules the user named to import (``--import``): their registrations, wrappers and
            ``module:Id`` env ids are made.
        trust_kwargs: the recorded kwargs and reset options are used as they are (``--trust-kwargs``).
    """

    import_modules: tuple[str, ...] = ()
    trust_kwargs: bool = False

    def names(self, module: str) -> bool:
        """``module`` is one the user imported, or lies in one."""
        return any(module == m or module.startswith(m + ".") for m in self.import_modules)


class Refused(NamedTuple):
    """Why a folder's name or value is not used, and what the user may pass instead."""

    reason: str
    hint: str


def import_user_modules(names: Iterable[str] | None) -> tuple[str, ...]:
    """Import the modules the user named (``--import``), in order: their registrations count from then on.

    Args:
        names: dotted module names (``mypackage.envs``).

    Returns:
        The names, as a tuple (for ``Trust.import_modules``).

    Raises:
        ConfigError: a name that is not a dotted module name, or a module that does not import.
    """
    if isinstance(names, str):
        raise ConfigError(f"import_modules must be a list of module names, not the string {names!r}")
    out = tuple(names or ())
    for name in out:
        if not is_module_name(name):
            raise ConfigError(f"--import {name!r} is not a module name (e.g. mypackage.envs)")
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # the user's module may raise anything
            raise ConfigError(f"--import {name}: cannot import it: {type(exc).__name__}: {exc}") from exc
        gym.register_envs(module)
    return out


def user_trust(import_modules: Iterable[str] | None = None, trust_kwargs: bool = False) -> Trust:
    """What the user trusts (``verify``'s and ``render``'s arguments), its modules imported.

    Args:
        import_modules: modules to import (``--import``).
        trust_kwargs: use the recorded kwargs as they are (``--trust-kwargs``).

    Raises:
        ConfigError: ``trust_kwargs`` is not a bool, or a module is not a module name or does not import.
    """
    if not isinstance(trust_kwargs, bool):
        raise ConfigError(f"trust_kwargs must be True or False, not {trust_kwargs!r}")
    return Trust(import_user_modules(import_modules), trust_kwargs)


def recorded_snapshot(name: Any) -> Any:
    """The built-in snapshot hook a recording names, or ``Refused`` saying why it is not resolved.

    Args:
        name: the manifest's ``env.snapshot.name``.
    """
    from ..record.snapshots import BUILT_IN

    if isinstance(name, str) and name in BUILT_IN_SNAPSHOTS:
        return BUILT_IN[name]
    shown = repr(name)[:_SHOWN]
    hint = (f"pass --snapshot {shlex.quote(name)} (snapshot= in Python) if you trust that code"
            if isinstance(name, str) else "pass --snapshot module:object (snapshot= in Python): the hook the recording used")
    return Refused(f"the recording names the snapshot hook {shown}, which is not one of envrec's "
                   f"({', '.join(BUILT_IN_SNAPSHOTS)}), and a hook named by a folder is not imported", hint)


def _name(entry_point: Any) -> str | None:
    """An entry point as ``module:qualname`` (a registered callable's too), None when it is neither."""
    if isinstance(entry_point, str):
        return entry_point if entry_point.count(":") == 1 else None
    return callable_name(entry_point)


def _top_package(entry_point: str) -> str:
    return entry_point.split(":")[0].split(".")[0]


def recorded_env_id(env_id: str, trust: Trust) -> str | Refused:
    """The id to look up for a recorded env id: ``module:Id`` becomes ``Id`` when the user imported
    ``module``, else is refused; an id not registered yet has its namespace's installed plugins (and ALE's
    package) loaded, never a module the folder names.

    Args:
        env_id: the recorded id (the spec's, or the manifest's ``env_id``).
        trust: what the user trusts.
    """
    module, sep, bare = env_id.rpartition(":")
    if sep:
        if not (trust.names(module) and module in sys.modules):
            return Refused(f"its env id {env_id[:_SHOWN]!r} names the module {module[:_SHOWN]!r}, and a module named by a "
                           "folder is not imported", f"pass --import {shlex.quote(module)} if you trust that module, or --make module:function")
        env_id = bare
    if env_id not in gym.registry:
        load_env_namespace(env_id)
    return env_id


def spec_refusal(spec: EnvSpec, trust: Trust, overridden: Iterable[str] = ()) -> Refused | None:
    """Why the recorded ``spec`` must not be made here, or None when it may.

    Args:
        spec: the recorded spec (``EnvSpec.from_json`` of the manifest's ``env.spec``).
        trust: what the user trusts.
        overridden: kwargs the user gives (render's ``env_kwargs``): the recorded ones are not used.
    """
    recorded = _name(spec.entry_point)
    if recorded is None:
        return Refused(f"its recorded entry point {str(spec.entry_point)[:_SHOWN]!r} is not module:Class", _MAKE)
    env_id = recorded_env_id(spec.id, trust)
    if isinstance(env_id, Refused):
        return env_id
    registered = gym.registry.get(env_id)
    if registered is None:
        return Refused(f"its env id {spec.id[:_SHOWN]!r} is not registered here, and an entry point named by a folder is "
                       "not called", f"pass --import MODULE (import_modules= in Python) naming the module that registers it (the recorded "
                       f"entry point is in {_top_package(recorded)[:_SHOWN]!r}) if you trust it, or --make module:function")
    if _name(registered.entry_point) != recorded:
        return Refused(f"its recorded entry point {recorded[:_SHOWN]} is not the one registered here for {env_id!r} "
                       f"({_name(registered.entry_point)})", _MAKE)
    allowed = ("gymnasium", _top_package(recorded), *trust.import_modules)
    wrappers = []
    for w in spec.additional_wrappers:
        found = _wrapper(w.entry_point, allowed)
        if isinstance(found, Refused):
            return found
        wrappers.append((w, found))
    if trust.trust_kwargs:
        return None
    skip = set(overridden)
    why = kwargs_refusal({k: v for k, v in spec.kwargs.items() if k not in skip}, _defaults(registered), "its kwarg")
    for w, cls in wrappers:
        why = why or kwargs_refusal(w.kwargs or {}, _signature_defaults(cls), f"its wrapper {w.name}'s kwarg")
    return Refused(why, KWARGS_HINT) if why else None


_MAKE = "pass --make module:function (make= in Python): your own code that builds the env as the recording made it"


def _wrapper(entry_point: Any, allowed: tuple[str, ...]) -> type | Refused:
    """The wrapper class a recorded entry point names, looked up in the modules already loaded, never imported."""
    name = _name(entry_point)
    if name is None:
        return Refused(f"its wrapper entry point {str(entry_point)[:_SHOWN]!r} is not module:Class", _MAKE)
    module_name, qualname = name.split(":")
    if module_name.split(".")[0] == "envrec" or qualname.split(".")[-1] in WRITING_WRAPPERS:
        return Refused(f"its wrapper {name[:_SHOWN]} records or renders (it would write or show what a folder says): it "
                       "is not made again", _MAKE)
    if not any(module_name == a or module_name.startswith(a + ".") for a in allowed):
        return Refused(f"its wrapper {name[:_SHOWN]} is neither Gymnasium's nor the env package's nor a module's you "
                       f"imported ({', '.join(dict.fromkeys(allowed))}), and a wrapper named by a folder is not imported",
                       f"pass --import MODULE if you trust its module, or {_MAKE}")
    obj: Any = sys.modules.get(module_name)
    if obj is None:
        return Refused(f"its wrapper {name[:_SHOWN]}: {module_name[:_SHOWN]} is not loaded here, and a module named by a "
                       "folder is not imported", f"pass --import {shlex.quote(module_name)} if you trust it, or --make module:function")
    for part in qualname.split("."):
        try:
            obj = inspect.getattr_static(obj, part)  # no module __getattr__, no descriptor: nothing runs
        except AttributeError:
            return Refused(f"its wrapper {name[:_SHOWN]} is not found in {module_name}", _MAKE)
    if not (isinstance(obj, type) and issubclass(obj, gym.Wrapper)):
        return Refused(f"its wrapper {name[:_SHOWN]} is not a gymnasium.Wrapper class", _MAKE)
    writing = tuple(getattr(gym.wrappers, w) for w in sorted(WRITING_WRAPPERS))
    if issubclass(obj, writing) or str(getattr(obj, "__module__", "")).split(".")[0] in ("envrec", "pipeline"):
        return Refused(f"its wrapper {name[:_SHOWN]} is {obj.__module__}.{obj.__qualname__}, which records or renders: "
                       "it is not made again", _MAKE)  # the same class under another name
    return obj


def _signature_defaults(fn: Any) -> dict[str, Any]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin or a callable without a signature: no defaults known
        return {}
    return {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}


def _defaults(registered: EnvSpec) -> dict[str, Any]:
    """The registered kwargs of an id, over the defaults of its registered entry point's signature."""
    from gymnasium.envs.registration import load_env_creator

    entry = registered.entry_point
    try:
        creator = load_env_creator(entry) if isinstance(entry, str) else entry  # this machine's registry names it
    except Exception:  # noqa: BLE001  (gym.make will say why it does not load)
        creator = None
    return {**(_signature_defaults(creator) if creator is not None else {}), **(registered.kwargs or {})}


def _path_key(key: str) -> bool:
    words = [w.removesuffix("s") if len(w) > 3 else w for w in re.split(r"[^a-z]+", key.lower()) if w]  # files, paths
    return any(w in _PATH_WORDS or w.endswith(("file", "path", "dir", "folder")) for w in words)


def _path_value(text: str) -> bool:
    return ("/" in text or "\\" in text or text.startswith("~") or text in (".", "..") or "\x00" in text
            or bool(_FILE_LIKE.search(text)))


def _numbers(value: Any) -> list[float] | None:
    """The numbers of a number or of a flat list of them, None for anything else."""
    items = value if isinstance(value, (list, tuple)) else [value]
    if not items or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
        return None
    return [abs(float(v)) if math.isfinite(v) else math.inf for v in items]


def _size_refusal(value: Any, default: Any) -> str | None:
    numbers = _numbers(value)
    if numbers is None:
        return None
    known = _numbers(default) or [0.0]
    limit = max(SIZE_FLOOR, SIZE_FACTOR * max(known))
    if max(numbers) > limit:
        why = (f"{SIZE_FACTOR} times its registered default {default!r:.{_SHOWN}}" if _numbers(default) and limit > SIZE_FLOOR
               else "with no registered default beyond it")
        return f"a number beyond {limit:g} ({why}): an allocation size a folder does not choose"
    cells = math.prod(numbers)
    cells_limit = max(CELLS_FLOOR, SIZE_FACTOR * math.prod(known))
    if len(numbers) > 1 and cells > cells_limit:
        return f"numbers whose product {cells:g} is beyond {cells_limit:g}: a shape a folder does not choose"
    return None


def _is_default(value: Any, default: Any) -> bool:
    try:
        return type(value) is type(default) and bool(value == default)
    except Exception:  # noqa: BLE001  (a default whose == raises, or an array's: not the same value)
        return False


def _value_refusal(key: str, value: Any, default: Any) -> str | None:
    """Why one recorded kwarg is not used, None when it may be (it is the default, or neither a path nor a size)."""
    if _is_default(value, default) or key in STEP_LIMITS:
        return None
    if isinstance(value, Mapping):
        return next((why for k, v in value.items() if (why := _value_refusal(str(k), v, None))), None)
    texts = [value] if isinstance(value, str) else [v for v in value if isinstance(v, str)] if isinstance(value, (list, tuple)) else []
    other = f" other than the registered default {default!r:.{_SHOWN}}" if default is not None else ""
    if texts and _path_key(key):
        return f"its key names a file, path or folder, and a folder does not choose one{other}"
    if any(_path_value(t) for t in texts):
        return f"a value that looks like a path, a file or a module:object, which a folder does not choose{other}"
    if isinstance(value, (list, tuple)) and any(isinstance(v, (list, tuple, Mapping)) for v in value):
        return next((why for v in value if (why := _value_refusal(key, v, None))), None)
    return _size_refusal(value, default)


def kwargs_refusal(kwargs: Mapping[str, Any], defaults: Mapping[str, Any], what: str = "its kwarg") -> str | None:
    """Every recorded kwarg that is refused, with why, as one text; None when all may be used.

    Args:
        kwargs: the recorded kwargs (an env's, a wrapper's, a reset's options).
        defaults: the registered defaults by key.
        what: how a kwarg is named in the text (``"its kwarg"``, ``"its wrapper X's kwarg"``).
    """
    refused = []
    for key, value in kwargs.items():
        why = _value_refusal(str(key), value, defaults.get(key))
        if why is not None:
            refused.append(f"{what} {str(key)[:_SHOWN]}={_shown(value)} is refused: {why}")
    return "; ".join(refused) or None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def options_refusal(options: Any, trust: Trust) -> Refused | None:
    """Why an episode's recorded reset options are not passed to ``env.reset`` (a path or size in them), or None.

    Args:
        options: the episode's recorded ``options`` (None, or a dict).
        trust: what the user trusts.
    """
    if trust.trust_kwargs or not isinstance(options, Mapping):
        return None
    why = kwargs_refusal(options, {}, "its reset option")
    return Refused(why, KWARGS_HINT) if why else None

