"""``envrec view DIR [--port P] [--host H] [--allow-host NAME]... [--stale-after S] [--no-browser]``."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import webbrowser

from envrec.env_ids import is_module_name
from envrec.errors import ConfigError

from .live import STALE_AFTER_S

__all__ = ["add_parser"]


def add_parser(sub) -> None:
    """Register ``envrec view`` on the CLI's subparsers."""
    v = sub.add_parser(
        "view", help="watch recorded episodes: video synced with reward, action and observation plots",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Serve a folder of recordings to a browser: the episodes of every recording, each episode's clip\n"
                    "with its reward, action and observation plots under it, the cursor following the video.\n"
                    "Binds 127.0.0.1 by default; Ctrl-C stops it.",
        epilog="examples:\n"
               "  envrec view recordings                          opens a browser at http://127.0.0.1:8765/\n"
               "  envrec view runs --port 0 --no-browser          any free port, the address printed\n"
               "  envrec view runs --host 0.0.0.0 --allow-host gpu-box   reachable as http://gpu-box:8765/",
    )
    v.add_argument("directory", help="a folder of recordings and clips (searched recursively)")
    v.add_argument("--port", type=int, default=8765, help="port to serve on (default 8765; 0: any free port)")
    v.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    v.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="a name browsers may reach the server by besides the bound address (and localhost when bound "
                        "to a loopback or all addresses), e.g. this machine's host name; repeat for more")
    v.add_argument("--stale-after", type=float, default=STALE_AFTER_S, metavar="SECONDS",
                   help="a recording whose manifest was never finalized reads 'interrupted' once none of its files changed "
                        f"for this long and no worker of it runs here (default {STALE_AFTER_S:g}; at least three of its "
                        "commit intervals)")
    v.add_argument("--no-browser", action="store_true", help="do not open a browser; print the address only")
    v.add_argument("--import", dest="import_modules", action="append", default=[], metavar="MODULE",
                   help="a module you trust (your env registration module), named with --import in the verify and "
                        "render commands the viewer shows (not imported by the viewer, which makes no env); repeat for more")
    v.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .server import ViewerServer

    if not os.path.isdir(args.directory):
        print(f"envrec view: {args.directory} is not a folder", file=sys.stderr)
        return 2
    try:
        server = ViewerServer(args.directory, args.host, args.port, allow_hosts=args.allow_host, stale_after_s=args.stale_after)
    except ConfigError as exc:
        print(f"envrec view: --stale-after: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"envrec view: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    bad = [m for m in args.import_modules if not is_module_name(m)]
    if bad:
        server.server_close()
        print(f"envrec view: --import {bad[0]!r} is not a module name (e.g. mypackage.envs)", file=sys.stderr)
        return 2
    server.catalog.verdicts.imports = tuple(args.import_modules)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    print(f"envrec view: {server.root} at {server.url} (Ctrl-C to stop)", flush=True)
    if not args.no_browser:
        webbrowser.open(server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
