"""``envrec bench``: what does recording cost this environment? Measured side by side.

``runner`` steps every variant interleaved, ``variants`` holds the synthetic
environment and the alternatives envrec is compared with, ``monitor`` samples
memory and CPU, ``report`` prints, ``command`` is the command line.
"""

from .command import env_factory, main, parse_frames
from .report import format_table, plot_rows, rows_json
from .runner import EXTRA_VARIANTS, VARIANTS, BenchRow, run_bench, run_for

__all__ = [
    "EXTRA_VARIANTS",
    "VARIANTS",
    "BenchRow",
    "env_factory",
    "format_table",
    "main",
    "parse_frames",
    "plot_rows",
    "rows_json",
    "run_bench",
    "run_for",
]
