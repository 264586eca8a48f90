"""``envrec export DIR... --parquet OUT | --minari DATASET_ID``."""

from __future__ import annotations

import argparse
import sys
import time

__all__ = ["add_parser"]


def add_parser(sub) -> None:
    """Register ``envrec export`` on the CLI's subparsers."""
    e = sub.add_parser(
        "export", help="export recordings as a Parquet dataset or a Minari dataset",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Export the recordings in folders (searched recursively) as a Parquet dataset, one partition per\n"
                    "recording, or as a local Minari dataset, a batch at a time, each batch's CRC-32 checked.",
        epilog="examples:\n"
               "  envrec export recordings --parquet cartpole.parquet        needs envrec[arrow]\n"
               "  envrec export runs/*/traces --minari envrec/cartpole/random-v0 --author me   needs envrec[minari]",
    )
    e.add_argument("paths", nargs="+", metavar="DIR", help="folders (searched recursively) or globs of recordings")
    to = e.add_mutually_exclusive_group(required=True)
    to.add_argument("--parquet", metavar="OUT", help="write a Parquet dataset, one partition per recording, to the new folder OUT")
    to.add_argument("--minari", metavar="DATASET_ID", help="create the local Minari dataset DATASET_ID (e.g. envrec/cartpole/random-v0)")
    e.add_argument("--author", default=None, help="Minari: the dataset's author")
    e.add_argument("--author-email", default=None, help="Minari: the author's email")
    e.add_argument("--algorithm", default=None, help="Minari: the algorithm that produced the episodes")
    e.add_argument("--description", default=None, help="Minari: a description of the dataset")
    e.add_argument("--code-permalink", default=None, help="Minari: a link to the code that recorded it")
    e.add_argument("--no-verify", action="store_true", help="skip the CRC-32 check of each batch (sizes are still checked)")
    e.set_defaults(func=run)


def _missing(extra: str, exc: ImportError) -> int:
    from envrec.extras import install_hint

    print(f"envrec export: {exc.name or exc} is not installed: {install_hint(extra)}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from envrec.errors import EnvrecError

    minari_only = [f"--{k.replace('_', '-')}" for k in ("author", "author_email", "algorithm", "description", "code_permalink")
                   if getattr(args, k) is not None]
    if args.parquet and minari_only:
        print(f"envrec export: {', '.join(minari_only)} only apply to --minari", file=sys.stderr)
        return 2
    started = time.perf_counter()
    try:
        if args.parquet:
            try:
                import pyarrow  # noqa: F401

                from envrec.export import to_parquet
            except ImportError as exc:
                return _missing("arrow", exc)
            s = to_parquet(args.paths, args.parquet, verify=not args.no_verify)
            took = time.perf_counter() - started
            print(f"{s.rows} steps -> {s.path} ({s.files} Parquet file(s), {s.bytes / 1e6:.1f} MB) in {took:.1f} s")
            return 0
        try:
            import minari  # noqa: F401

            from envrec.export import to_minari
        except ImportError as exc:
            return _missing("minari", exc)
        meta = {"author": args.author, "author_email": args.author_email, "algorithm_name": args.algorithm,
                "description": args.description, "code_permalink": args.code_permalink}
        ds = to_minari(args.paths, args.minari, verify=not args.no_verify, **{k: v for k, v in meta.items() if v is not None})
        took = time.perf_counter() - started
        print(f"{ds.total_episodes} episodes, {ds.total_steps} steps -> Minari dataset {args.minari} in {took:.1f} s")
        return 0
    except (EnvrecError, ValueError) as exc:
        print(f"envrec export: {exc}", file=sys.stderr)
        return 2
