"""Does a change cost the loop anything? ``envrec bench`` of two installs of envrec, run alternately.

Each install is a Python interpreter with envrec installed (e.g. a venv of the commit before a
change and one of the commit after). The two run ``envrec bench`` in turn, ``--pairs`` times, so
machine drift hits both alike; each run measures every variant against the bare env in the same
run, so the ratios compare across runs. Prints, per variant, the median ratio to the bare env and
the median env-side µs per step above it for each install, and after/before of both (for a
free env, whose ratios are tiny, the µs are what to compare); and the median over runs of each
run's longest single ``step()``/``reset()`` call.

Usage: ``python scripts/bench/bench_revisions.py BEFORE/bin/python AFTER/bin/python
[--pairs 3] [--rounds 3] [--seconds 1] [--env CartPole-v1 | --frames 210x160 [--step-us 500]] [--variants ...]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess


def one_run(python: str, bench_args: list[str]) -> dict[str, dict]:
    out = subprocess.run([python, "-m", "envrec", "bench", "--json", "-q", *bench_args],
                         capture_output=True, text=True, timeout=1800, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{python} -m envrec bench failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
    return {row["variant"]: row for row in json.loads(out.stdout)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("before", help="the interpreter of the install before the change")
    p.add_argument("after", help="the interpreter of the install after it")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--env")
    p.add_argument("--frames")
    p.add_argument("--variants")
    p.add_argument("--step-us", help="CPU a synthetic step burns (with --frames)")
    a = p.parse_args()
    bench_args = ["--rounds", str(a.rounds), "--seconds", str(a.seconds)]
    for flag in ("env", "frames", "variants", "step_us"):
        if getattr(a, flag):
            bench_args += [f"--{flag.replace('_', '-')}", getattr(a, flag)]
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for i in range(a.pairs):
        for side in (("before", "after") if i % 2 == 0 else ("after", "before")):
            runs[side].append(one_run(getattr(a, side), bench_args))
    variants = [v for v in runs["before"][0] if v != "none" and all(v in r for rs in runs.values() for r in rs)]
    print(f"{'variant':<22} {'ratio before':>12} {'ratio after':>12} {'µs/step before':>15} {'µs/step after':>14} {'ratio a/b':>10} {'µs a/b':>8}"
          f" {'longest before':>15} {'longest after':>14}")
    for v in variants:
        ratio = {s: statistics.median(r[v]["ratio"] for r in rs) for s, rs in runs.items()}
        over = {s: statistics.median(r[v]["overhead_us"] for r in rs) for s, rs in runs.items()}
        longest = {s: statistics.median(r[v]["longest_call_ms"] for r in rs) for s, rs in runs.items()}
        print(f"{v:<22} {ratio['before']:>12.3f} {ratio['after']:>12.3f} {over['before']:>15.1f} {over['after']:>14.1f}"
              f" {ratio['after'] / ratio['before']:>9.2f}x {over['after'] / over['before']:>7.2f}x"
              f" {longest['before']:>12.1f} ms {longest['after']:>11.1f} ms")


if __name__ == "__main__":
    main()
