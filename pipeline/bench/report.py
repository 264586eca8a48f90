"""How ``envrec bench`` shows its rows: a table, JSON, a plot."""

from __future__ import annotations

import json

from .runner import BenchRow

__all__ = ["format_table", "plot_rows", "rows_json"]


def format_table(rows: list[BenchRow]) -> str:
    lines = [
        (
            f"{'variant':<20} {'steps/s':>9} {'ratio':>7} {'+µs/step':>10} {'longest':>9} "
            f"{'CPU µs/step: env':>17} {'worker':>7} {'ffmpeg':>7} "
            f"{'env RSS':>8} {'worker':>7} {'ffmpeg':>7} {'video':>9}"
        )
    ]

    def us(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f}"

    for r in rows:
        worker = r.child_rss_mib.get("worker")
        ffmpeg = r.child_rss_mib.get("ffmpeg")
        lines.append(
            f"{r.variant:<20} {r.steps_per_s:>9.0f} {r.ratio:>6.2f}x {r.overhead_us:>+10.1f} {r.longest_call_ms:>7.1f}ms "
            f"{us(r.env_cpu_us):>17} {us(r.worker_cpu_us):>7} {us(r.ffmpeg_cpu_us):>7} "
            f"{r.env_rss_growth_mib:>+6.0f}Mi {'-' if worker is None else f'{worker:.0f}Mi':>7} "
            f"{'-' if ffmpeg is None else f'{ffmpeg:.0f}Mi':>7} {r.video_bytes / 1024:>7.0f}Ki"
        )
    lines.append("ratio: steps/s over 'none' (envrec's rounds include its workers catching up); +µs/step: time per step")
    lines.append("above 'none'; longest: single step()/reset();")
    lines.append("CPU µs/step: CPU per step of the env process, of envrec's worker processes and of ffmpeg, over the measured")
    lines.append("rounds (worker start and warm-up excluded; work still queued when the rounds end is counted at close);")
    lines.append("env RSS: growth of the env process while the variant ran; worker/ffmpeg: peak RSS of the variant's processes")
    for r in rows:
        for recorder, s in r.envrec.items():
            if "call_p50_us" in s:
                lines.append(
                    f"{r.variant} {recorder}: inside envrec per call p50 {s['call_p50_us']:.1f} µs, "
                    f"p99 {s['call_p99_us']:.1f} µs, max {s['call_max_us'] / 1e3:.2f} ms; blocked {s['blocked_s']:.3f} s"
                )
    return "\n".join(lines)


def plot_rows(rows: list[BenchRow], path: str, title: str) -> None:
    """Bar charts of the ratio to 'none' and the longest call, into a PNG (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError("--plot needs matplotlib: pip install 'envrec[plot]'") from exc
    names = [r.variant for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    colours = ["#2b8cbe" if n.startswith("envrec") else "#999999" for n in names]
    a.barh(names, [r.ratio for r in rows], color=colours)
    a.axvline(1.0, color="black", lw=0.8)
    a.set_xlabel("steps/s relative to no recording (higher is better)")
    a.invert_yaxis()
    b.barh(names, [r.longest_call_ms for r in rows], color=colours)
    b.set_xscale("log")
    b.set_xlabel("longest single step()/reset() call, ms (log)")
    b.invert_yaxis()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def rows_json(rows: list[BenchRow]) -> str:
    return json.dumps([r.__dict__ for r in rows], indent=1, default=str)
