"""``envrec doctor`` as a user runs it: everything passes on this machine, and each failure, made real, is
reported with its fix and exit status 1; nothing the doctor makes is left behind.

The env failures are envs of ``tests/support/doctor_envs.py`` (given as ``module:id``: the doctor makes its
env in an interpreter of its own). MuJoCo's GL: under ``CI=true`` (``.ci/run`` installs Mesa's EGL and OSMesa)
at least one platform must render; elsewhere a machine where none does skips that part with the reason.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time

import pytest

from envrec.cli import build_parser
from envrec.doctor import CheckStatus, Result, run_checks
from envrec.doctor.env_check import env_results, probe_env
from envrec.doctor.gl import first_rendering
from envrec.doctor.result import allow_running, bounded, kill_running, run_process
from envrec.errors import ConfigError

from .support.doctor_envs import env_id
from .support.headless_gl import CANDIDATES, need_headless_gl, need_mujoco
from .support.processes import child_env

pytestmark = pytest.mark.timeout(300)

TIMEOUT_S = 240  # a whole doctor run: ~5 s alone (three MuJoCo GL probes, the env, ffmpeg), far more under load
SUBCOMMANDS = ("record", "inspect", "export", "view", "verify", "render", "doctor", "bench", "ship")


def doctor(*args: str, env: dict[str, str] | None = None, **popen) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envrec", "doctor", *args], capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=child_env() if env is None else env, **popen)


def checks(out: str) -> dict[str, tuple[str, str, str]]:
    """The text report as ``{check: (label, message, fix)}``."""
    found: dict[str, tuple[str, str, str]] = {}
    last = ""
    for line in out.splitlines():
        if line.startswith("      fix: "):
            label, message, _ = found[last]
            found[last] = (label, message, line.removeprefix("      fix: "))
        elif line[:4] in ("PASS", "WARN", "FAIL", "SKIP", "INFO"):
            last, message = line[6:].split(": ", 1)
            found[last] = (line[:4], message, "")
    return found


def test_everything_passes_here_for_cartpole_and_nothing_is_left(tmp_path):
    own_tmp = tmp_path / "tmp"  # the doctor's temporary folders go here: another test's (or job's) are not its
    own_tmp.mkdir()
    folder = tmp_path / "new" / "recordings"
    out = doctor("--folder", str(folder), cwd=tmp_path, env={**child_env(), "TMPDIR": str(own_tmp)})
    assert out.returncode == 0, out.stdout + out.stderr
    found = checks(out.stdout)
    for name in ("env", "env render modes", "env render_fps", "env frame", "SDL video driver", "ffmpeg", "ffmpeg encodes",
                 "folder", "folder space", "memfd", "eventfd", "recording"):
        assert found[name][0] == "PASS", (name, found[name])
    assert found["env frame"][1].startswith("uint8 400x600x3")
    assert "30 frames decoded back" in found["ffmpeg encodes"][1] and "padded to 64x48" in found["ffmpeg encodes"][1]
    assert found["versions"][0] == "INFO" and "gymnasium" in found["versions"][1]
    assert found["MuJoCo GL"][0] in ("PASS", "WARN", "SKIP") and found["open files limit"][0] in ("PASS", "WARN")
    assert "fix the failures" not in out.stdout and "ready to record here" in out.stdout.splitlines()[-1]
    assert not folder.exists() and not (tmp_path / "new").exists()  # made for the check, removed after
    assert not [n for n in os.listdir(own_tmp) if n.startswith("envrec-doctor-")]  # the test clip's folder is gone


@pytest.mark.slow
def test_json_is_a_list_of_results_and_a_mujoco_gl_platform_renders(tmp_path):
    out = doctor("--json", "--folder", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    results = json.loads(out.stdout)
    assert isinstance(results, list) and {"name", "status", "message", "fix", "seconds", "facts"} <= set(results[0])
    by_name = {r["name"]: r for r in results}
    assert by_name["env frame"]["facts"]["frame"] == {"type": "ndarray", "problem": "", "dtype": "uint8", "shape": [400, 600, 3]}
    assert by_name["folder"]["status"] == "pass" and by_name["folder"]["facts"]["made"] is False
    assert os.listdir(tmp_path) == []  # the probe file is gone
    assert by_name["ffmpeg"]["facts"]["version"] and all(r["status"] != "fail" for r in results)
    gl = by_name["MuJoCo GL"]
    if gl["status"] == "skip":
        need_mujoco()  # skips with the reason, fails under CI=true
    if not gl["facts"]["renders"]:
        need_headless_gl()  # the same: under CI=true no platform rendering is a failure
    assert set(gl["facts"]["renders"]) <= {"egl", "osmesa", "glfw"} and gl["facts"]["renders"]


def _unwritable_folder(tmp_path) -> tuple[str, contextlib.AbstractContextManager]:
    """A folder that exists and that this process cannot write in: mode 0o500, or immutable when run as root
    (root writes in any folder whatever its mode, but not in one with the immutable attribute)."""
    folder = tmp_path / "locked"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o500)
        return str(folder), contextlib.closing(type("Undo", (), {"close": lambda self: folder.chmod(0o700)})())
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(folder)], capture_output=True).returncode != 0:
        if os.environ.get("CI") == "true":  # e2fsprogs' chattr is in every Debian; CI's /tmp takes +i (seen in .ci/run)
            pytest.fail("as root, a folder that cannot be written needs chattr +i, which does not work here")
        print("skipped: as root, a folder that cannot be written needs chattr +i, which does not work here")
        pytest.skip("as root, a folder that cannot be written needs chattr +i, which does not work here")
    return str(folder), contextlib.closing(type("Undo", (), {"close": lambda self: subprocess.run([chattr, "-i", str(folder)])})())


def test_a_folder_under_a_file_fails_with_its_fix(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("in the way\n")
    out = doctor("--only", "folder", "--folder", str(blocker / "x"))
    assert out.returncode == 1, out.stdout + out.stderr
    label, message, fix = checks(out.stdout)["folder"]
    assert label == "FAIL" and f"{blocker} is a file, not a folder" in message
    assert fix.startswith(f"remove or rename the file {blocker}") and "envrec record --out DIR" in fix
    assert "folder space" not in checks(out.stdout) and "fix the failures above" in out.stdout
    assert set(checks(out.stdout)) == {"versions", "folder"}  # --only folder
    assert blocker.read_text() == "in the way\n"


def test_a_folder_that_cannot_be_written_fails_with_its_fix(tmp_path):
    folder, undo = _unwritable_folder(tmp_path)
    with undo:
        out = doctor("--only", "folder", "--folder", folder)
        assert os.listdir(folder) == []
    assert out.returncode == 1, out.stdout + out.stderr
    label, message, fix = checks(out.stdout)["folder"]
    assert label == "FAIL" and "exists but envrec cannot write in it" in message
    assert ("Operation not permitted" in message or "Permission denied" in message) and f"chmod u+w {folder}" in fix


@pytest.mark.parametrize(("name", "check", "said", "fix"), [
    ("HumanOnly", "env render modes", "no rgb_array or ansi render mode (its modes: human)",
     "give the env metadata['render_modes'] with 'rgb_array'"),
    pytest.param("NoFps", "env render_fps", "no render_fps in its metadata", "pass fps= to RecordVideo (envrec record --fps N",
                 marks=pytest.mark.slow),
    pytest.param("FloatFrames", "env frame", "a frame must have dtype uint8 (RGB values 0-255), not float32",
                 "render() must return a uint8 HxWx3 numpy array", marks=pytest.mark.slow),
])
def test_an_env_envrec_cannot_film_fails_with_its_fix(name, check, said, fix):
    out = doctor("--only", "env", "--env", env_id(name))
    assert out.returncode == 1, out.stdout + out.stderr
    found = checks(out.stdout)
    assert found["env"][0] == "PASS" and found[check][0] == "FAIL", found
    assert said in found[check][1] and found[check][2].startswith(fix), found[check]
    assert [n for n, (label, _, _) in found.items() if label == "FAIL"] == [check]


def test_ffmpeg_missing_fails_with_its_fix(tmp_path):
    env = {k: v for k, v in child_env().items() if k != "ENVREC_FFMPEG"}
    env.update(IMAGEIO_FFMPEG_EXE=str(tmp_path / "no-ffmpeg"), PATH=os.path.dirname(sys.executable))  # no ffmpeg on PATH
    out = doctor("--only", "ffmpeg", env=env)
    assert out.returncode == 1, out.stdout + out.stderr
    label, message, fix = checks(out.stdout)["ffmpeg"]
    assert label == "FAIL" and message == f"{tmp_path / 'no-ffmpeg'} (named by IMAGEIO_FFMPEG_EXE={tmp_path / 'no-ffmpeg'}) is not an executable file"
    assert fix.startswith("unset IMAGEIO_FFMPEG_EXE or point it at ffmpeg") and "ENVREC_FFMPEG" in fix
    assert "ffmpeg encodes" not in checks(out.stdout)


def test_workers_that_cannot_start_fail_the_recording_with_its_fix(tmp_path):
    out = doctor("--only", "recording", env={**child_env(), "ENVREC_PYTHON": shutil.which("false") or "/bin/false"})
    assert out.returncode == 1, out.stdout + out.stderr
    found = checks(out.stdout)
    label, message, fix = found["recording"]
    assert label == "FAIL" and "the encoder finished 0 clip(s)" in message and "the trace broke" in message
    assert fix.startswith("envrec starts its workers as `python -P -m envrec.workers ROLE`") and "ENVREC_PYTHON" in fix
    assert [n for n, (lab, _, _) in found.items() if lab == "FAIL"] == ["recording"]


def test_bad_usage_exits_2():
    out = doctor("--env", "not an id!")
    assert out.returncode == 2 and out.stdout == ""
    assert "envrec doctor: --env 'not an id!': Malformed environment ID" in out.stderr
    out = doctor("--only", "env,nothing")
    assert out.returncode == 2 and "argument --only: 'env,nothing': the groups are env, sdl, ffmpeg" in out.stderr
    with pytest.raises(ConfigError, match="no check group 'nothing': the groups are env, sdl"):
        run_checks(only=["nothing"])


@pytest.mark.slow
def test_bad_env_ids():
    out = doctor("--only", "env", "--env", "CartPol-v1")
    assert out.returncode == 1, out.stdout + out.stderr
    label, message, fix = checks(out.stdout)["env"]
    assert label == "FAIL" and "cannot make 'CartPol-v1'" in message and "Did you mean: `CartPole`?" in message
    assert "gym.pprint_registry()" in fix and "env frame" not in checks(out.stdout)
    out = doctor("--only", "env", "--env", "no_such_module_here:Thing-v0")
    label, message, fix = checks(out.stdout)["env"]
    assert out.returncode == 1 and label == "FAIL" and "ModuleNotFoundError" in message
    assert fix == "install the package that provides 'no_such_module_here', or fix the module named in the id"


@pytest.mark.slow
def test_a_mujoco_env_without_a_headless_gl_fails_and_passes_once_it_is_set():
    need_mujoco()
    backend, _ = first_rendering(CANDIDATES)
    if backend is None:
        need_headless_gl()  # skips with the reason (fails under CI=true)
    base = {k: v for k, v in child_env().items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")}
    out = doctor("--only", "env", "--env", "InvertedPendulum-v5", env=base)
    assert out.returncode == 1, out.stdout + out.stderr
    found = checks(out.stdout)
    assert found["env frame"][0] == "FAIL" and "MUJOCO_GL=unset" in found["env frame"][1]
    assert found["env frame"][2].startswith("export MUJOCO_GL=") and found["MuJoCo GL"][0] == "FAIL"
    assert "MuJoCo's default, glfw, does not render: there is no display" in found["MuJoCo GL"][1]
    use = found["env frame"][2].split()[1].split("=")[1]
    out = doctor("--only", "env", "--env", "InvertedPendulum-v5", env={**base, "MUJOCO_GL": use})
    assert out.returncode == 0, out.stdout + out.stderr
    found = checks(out.stdout)
    assert found["env frame"][0] == "PASS" and found["env frame"][1].startswith("uint8 480x480x3")
    assert found["MuJoCo GL"] == ("PASS", found["MuJoCo GL"][1], "") and found["MuJoCo GL"][1].startswith(f"MUJOCO_GL={use} renders")


def test_a_low_open_files_limit_warns_and_passes(tmp_path):
    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    out = doctor("--only", "kernel", preexec_fn=lower)
    assert out.returncode == 0, out.stdout + out.stderr
    label, message, fix = checks(out.stdout)["open files limit"]
    assert label == "WARN" and message.startswith("RLIMIT_NOFILE 200") and "room for ~26" in message
    assert fix.startswith("ulimit -n")


def test_an_env_that_renders_text_passes_as_ansi():
    results = {r.name: r for r in env_results(env_id("AnsiOnly"), probe_env(env_id("AnsiOnly")))}
    assert all(r.status is CheckStatus.PASS for r in results.values()), results
    assert results["env render modes"].message == "ansi: text frames, recorded as asciicast clips (its modes: ansi)"
    assert results["env frame"].message.startswith("a text frame of 15 characters")


@pytest.mark.xdist_group("serial")
def test_an_env_that_hangs_is_given_up_on_and_killed():
    started = time.monotonic()
    findings = probe_env(env_id("Hangs"), timeout_s=3.0)
    assert time.monotonic() - started < 30
    [result] = env_results(env_id("Hangs"), findings)
    assert result.status is CheckStatus.FAIL and "it did not finish within 3 s" in result.message
    assert result.fix.startswith("try it alone: python -c")
    # the conftest fixture fails this test if the probe's interpreter were still alive


def _ctrl_c_after(delay: float) -> tuple[int, str, str, float]:
    """A doctor whose env hangs, sent SIGINT ``delay`` s after its checks started: its exit status, output, and how
    long it took to end after the signal."""
    proc = subprocess.Popen([sys.executable, "-m", "envrec", "doctor", "--only", "env,ffmpeg", "--env", env_id("Hangs")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())
    try:
        first = proc.stdout.readline()  # the versions line: the checks have started
        assert first.startswith("INFO  versions"), first
        time.sleep(delay)
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        return proc.returncode, out, err, time.monotonic() - started
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.xdist_group("serial")
def test_ctrl_c_ends_the_doctor_at_once_and_kills_its_probes():
    code, out, err, took = _ctrl_c_after(2.0)
    assert code == 130 and "interrupted" in err and took < 15, (out, err)
    # the env probe (asleep in its constructor) is gone: the conftest fixture fails a test that leaves it


@pytest.mark.slow
@pytest.mark.xdist_group("serial")
def test_ctrl_c_at_any_point_of_the_checks_ends_the_doctor():
    """Ctrl-C while the probes start, run, and the checks' threads make new ones: each time the doctor ends at once."""
    for delay in (0.0, 0.0, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0):
        code, out, err, took = _ctrl_c_after(delay)
        assert code == 130 and "interrupted" in err and took < 15, (delay, out, err)


SIGINT_IN_A_THREAD = """
import signal, sys, threading, time
from envrec.doctor import run_checks
def interrupt():
    time.sleep(float(sys.argv[2]))
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # taken by this thread, as the kernel may choose
threading.Thread(target=interrupt).start()
started = time.monotonic()
try:
    run_checks(sys.argv[1], only=("env",))
except KeyboardInterrupt:
    print(f"interrupted after {time.monotonic() - started:.1f} s")
"""


@pytest.mark.variants
@pytest.mark.parametrize("delay", [0.3, 2.0])
@pytest.mark.xdist_group("serial")
def test_ctrl_c_taken_by_a_checks_thread_still_ends_the_checks(delay):
    """SIGINT goes to any thread: one that is not the main thread only flags it, and the main thread, waiting on the
    hanging env's check, sees the flag within a fraction of a second (not when the env's 90-s limit ends)."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", SIGINT_IN_A_THREAD, env_id("Hangs"), str(delay)], capture_output=True,
                          text=True, timeout=60, env=child_env())
    assert done.returncode == 0 and done.stdout.startswith("interrupted after"), (done.stdout, done.stderr)
    assert time.monotonic() - started < 20, done.stdout


@pytest.mark.xdist_group("serial")
def test_a_process_started_after_ctrl_c_is_killed_at_once():
    """A check that starts a process just after Ctrl-C killed those running gets it killed too, not run to its limit."""
    kill_running()
    try:
        started = time.monotonic()
        done = run_process(["sleep", "60"], 30)
        assert done.returncode is None or done.returncode < 0
        assert time.monotonic() - started < 10
    finally:
        allow_running()
    assert run_process(["true"], 30).returncode == 0  # a new run of the checks runs its processes


@pytest.mark.xdist_group("serial")
def test_every_check_and_process_has_a_time_limit():
    started = time.monotonic()
    [result] = bounded("slow", lambda: [time.sleep(5), Result("slow", CheckStatus.PASS, "")][1:], 0.2)
    assert result.status is CheckStatus.FAIL and result.message == "did not finish within 0.2 s"
    def broken() -> list[Result]:
        raise OSError("a check that breaks")

    [result] = bounded("broken", broken, 5)
    assert result.status is CheckStatus.FAIL and result.message == "the check itself failed: OSError: a check that breaks"
    done = run_process(["sh", "-c", "sleep 60 & sleep 60"], 0.5)  # the group goes, the background sleep with it
    assert done.returncode is None and time.monotonic() - started < 20


def test_run_checks_in_process_leaves_no_memfd_fd_or_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVREC_SPARE_WORKER", "0")  # a spare keeps a socket and a pipe here by design (test_spare.py)
    fds = set(os.listdir("/proc/self/fd"))
    seen: list[Result] = []
    results = run_checks(folder=str(tmp_path / "r"), on_result=seen.append, only=("recording", "kernel", "folder", "ffmpeg"))
    assert [r.name for r in results] == [r.name for r in seen] == [
        "versions", "ffmpeg", "ffmpeg encodes", "folder", "folder space", "folder filesystem", "memfd", "eventfd",
        "open files limit", "recording"]  # in the order of GROUPS, whatever the order asked
    assert all(r.status in (CheckStatus.PASS, CheckStatus.WARN) for r in results[1:]), results
    assert {r.name: r.status for r in results}["memfd"] is CheckStatus.PASS and not (tmp_path / "r").exists()
    assert set(os.listdir("/proc/self/fd")) <= fds  # the memfd, its mappings and the eventfd are closed


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_subcommand_is_tested_here():
    assert set(_subparsers(build_parser())) == set(SUBCOMMANDS)


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_subcommand_describes_itself_with_examples(command):
    sub = _subparsers(build_parser())[command]
    text = sub.format_help()
    assert sub.description and len(sub.description) > 80, command
    assert isinstance(sub.formatter_class, type) and issubclass(sub.formatter_class, argparse.RawDescriptionHelpFormatter)
    examples = text.split("examples:\n", 1)[1].splitlines()
    assert examples and all(line.startswith(f"  envrec {command}") or "envrec " + command in line for line in examples if line)


def _raises(interrupted: bool):
    def run_checks(*_args, **_kwargs):
        try:
            raise KeyboardInterrupt if interrupted else ValueError("a check's own error")
        except (KeyboardInterrupt, ValueError):
            # what Thread.start raises when Ctrl-C comes while it waits (python/cpython#78667)
            raise RuntimeError("release unlocked lock")  # noqa: B904  (its context is the point)

    return run_checks


def test_ctrl_c_that_cpython_turns_into_a_runtime_error_still_ends_the_doctor_as_interrupted(monkeypatch, capsys):
    from envrec.doctor import command

    args = argparse.Namespace(env="CartPole-v1", folder=None, only=None, json=False)
    monkeypatch.setattr(command, "run_checks", _raises(interrupted=True))
    assert command.run(args) == 130
    assert "interrupted" in capsys.readouterr().err
    monkeypatch.setattr(command, "run_checks", _raises(interrupted=False))  # not Ctrl-C: a bug, raised as it is
    with pytest.raises(RuntimeError, match="release unlocked lock"):
        command.run(args)
