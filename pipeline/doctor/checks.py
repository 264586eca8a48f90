"""``run_checks``: every check of ``envrec doctor``, each under a time limit, in a fixed order.

The checks that start interpreters or ffmpeg (the env, SDL, MuJoCo's GL platforms, ffmpeg, the recording's
workers) run side by side in threads; the others are quick. Results are handed to ``on_result`` in order as soon as each is known, so a
terminal sees them come. Nothing a check makes outlives it: temporary folders, probe files, memfds,
eventfds and processes are all gone when ``run_checks`` returns.
"""

from __future__ import annotations

import importlib.metadata
import platform
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor

from ..errors import ConfigError
from ..version import __version__
from .display import SDL_TIMEOUT_S, gl_probes, gl_result, sdl_result
from .env_check import ENV_TIMEOUT_S, env_results, probe_env
from .ffmpeg_check import FFMPEG_TIMEOUT_S, ffmpeg_results
from .folder import folder_results
from .kernel import eventfd_result, memfd_result, nofile_result
from .recording import recording_result
from .result import CheckStatus, Result, allow_running, bounded, kill_running, wait_for

__all__ = ["DEFAULT_ENV", "DEFAULT_FOLDER", "GL_TIMEOUT_S", "GROUPS", "run_checks", "versions"]

DEFAULT_ENV = "CartPole-v1"
DEFAULT_FOLDER = "recordings"  # envrec record's default --out
# The checks by group, in the order they are reported: env (and MuJoCo GL), sdl, ffmpeg, folder, kernel (memfd,
# eventfd, the open-files limit), recording.
GROUPS = ("env", "sdl", "ffmpeg", "folder", "kernel", "recording")
GL_TIMEOUT_S = 30.0  # each MuJoCo GL platform's probe
SLACK_S = 5.0  # a group's limit beyond the limits of the processes it runs
QUICK_TIMEOUT_S = 20.0  # the folder's checks (fsyncs), the kernel's
RECORDING_TIMEOUT_S = 120.0  # two workers started and closed: ~1 s alone, far more on a loaded machine


def versions() -> Result:
    """Python, envrec, Gymnasium, NumPy (and MuJoCo, ale-py when installed) as an INFO line."""
    found = {"python": platform.python_version(), "envrec": __version__}
    for name in ("gymnasium", "numpy", "mujoco", "ale-py", "imageio-ffmpeg"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    kernel = f"{platform.system()} {platform.release()}"
    line = ", ".join(f"{k} {v}" for k, v in found.items())
    return Result("versions", CheckStatus.INFO, f"{line}; {kernel}", facts={**found, "kernel": kernel})


def _env_and_gl(env_id: str) -> list[Result]:
    """The env's results and MuJoCo GL's, probed side by side (the env's fix names the platform that renders)."""
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="envrec-doctor-env") as pool:
        findings = pool.submit(probe_env, env_id, ENV_TIMEOUT_S)
        probes = pool.submit(gl_probes, GL_TIMEOUT_S)

        def judge() -> list[Result]:
            found = findings.result()
            gl, backend = gl_result(probes.result(), found.uses_mujoco)
            return [*env_results(env_id, found, backend), gl]

        return bounded("env", judge, max(ENV_TIMEOUT_S, GL_TIMEOUT_S) + 2 * SLACK_S)


def run_checks(env_id: str = DEFAULT_ENV, folder: str = DEFAULT_FOLDER,
               on_result: Callable[[Result], None] | None = None, only: Collection[str] | None = None) -> list[Result]:
    """Run the checks; the results in order (versions, the env, headless rendering, ffmpeg, the folder, the kernel,
    a recording made by real workers).

    Args:
        env_id: the env to check (any id ``envrec.env_ids.make_env`` takes).
        folder: the output folder to check (made for the check and removed after, if missing).
        on_result: called with each result as soon as it and those before it are known.
        only: the groups of ``GROUPS`` to run (default: all); the versions are always reported.

    Raises:
        ConfigError: ``only`` names a group that does not exist.
    """
    unknown = sorted(set(only or ()) - set(GROUPS))
    if unknown:
        raise ConfigError(f"no check group {', '.join(map(repr, unknown))}: the groups are {', '.join(GROUPS)}")
    results: list[Result] = []

    def emit(batch: list[Result]) -> None:
        for result in batch:
            results.append(result)
            if on_result is not None:
                on_result(result)

    emit([versions()])
    slow = {"env": lambda: _env_and_gl(env_id), "sdl": lambda: bounded("SDL video driver", lambda: [sdl_result()], SDL_TIMEOUT_S + SLACK_S),
            "ffmpeg": lambda: bounded("ffmpeg", ffmpeg_results, 4 * FFMPEG_TIMEOUT_S + SLACK_S),
            "recording": lambda: bounded("recording", lambda: [recording_result()], RECORDING_TIMEOUT_S)}
    quick = {"folder": lambda: bounded("folder", lambda: folder_results(folder), QUICK_TIMEOUT_S),
             "kernel": lambda: bounded("memfd", lambda: [memfd_result(), eventfd_result(), nofile_result()], QUICK_TIMEOUT_S)}
    chosen = [g for g in GROUPS if only is None or g in only]
    allow_running()
    pool = ThreadPoolExecutor(max_workers=len(slow), thread_name_prefix="envrec-doctor")
    try:
        started = {g: pool.submit(slow[g]) for g in chosen if g in slow}
        for group in chosen:
            emit(wait_for(started[group]) if group in started else quick[group]())
    except BaseException:  # Ctrl-C, wherever it comes: every probe's process is killed, those still to start too,
        kill_running()     # so the checks' threads end now (and remove what they made) rather than at their limits
        raise
    finally:
        pool.shutdown(wait=True)
    return results
