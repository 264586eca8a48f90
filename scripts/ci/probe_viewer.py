"""What ``envrec view`` refuses on a stranger's folder: hostile requests by check, and what got through.

Records a CartPole episode with its clip into a temporary folder, adds what a
crafted folder may hold (an HTML page, a scripted SVG, a symlink to a file
outside), serves it, and sends one table of hostile requests per check:

* ``path``: names leaving the folder (``..``, encoded separators, absolute
  paths, symlinks out);
* ``type``: files of the folder that are not clips (HTML, SVG, XHTML, JS, ...);
* ``host``: ``Host`` headers naming another site (DNS rebinding), with the
  server bound to 0.0.0.0 and one ``--allow-host`` name;
* ``connections``: idle connections beyond ``connections.MAX_PER_CLIENT`` (all from 127.0.0.1), sent at once;
* ``timeout``: how long an idle connection holds a thread (``connections.REQUEST_DEADLINE_S``).

It prints, per check, the requests sent, how many the check refused (the
server's own ``refused`` counter) and how many returned the outside file's
or the page's bytes (must be 0). Usage: ``python scripts/ci/probe_viewer.py``.
"""

from __future__ import annotations

import http.client
import os
import socket
import tempfile
import time

import gymnasium as gym

import envrec
from envrec.viewer import ViewerServer, connections

SECRET = b"SECRET-OUTSIDE-THE-FOLDER"
PAGE = b"<html><script>fetch('/api/pwned')</script></html>"


def _record(folder: str) -> str:
    env = envrec.RecordVideo(gym.make("CartPole-v1", render_mode="rgb_array"), folder, episode_trigger=lambda e: True)
    env = envrec.RecordTrace(env, folder, name_prefix="cp")
    env.reset(seed=0)
    done = False
    while not done:
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        done = term or trunc
    env.close()
    return next(n for n in os.listdir(folder) if n.endswith(".mp4"))


def _get(port: int, path: str, host: str | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path, headers={"Host": f"127.0.0.1:{port}" if host is None else host})
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, body


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "rec")
        clip = _record(root)
        with open(os.path.join(tmp, "secret.mp4"), "wb") as f:
            f.write(SECRET)
        os.symlink(os.path.join(tmp, "secret.mp4"), os.path.join(root, "link.mp4"))
        os.symlink(tmp, os.path.join(root, "linkdir"))
        pages = ["evil.html", "evil.htm", "evil.svg", "evil.xhtml", "evil.xml", "evil.js", "evil.json", "evil.txt", "evil"]
        for name in pages:
            with open(os.path.join(root, name), "wb") as f:
                f.write(PAGE)
        paths = ["/files/../secret.mp4", "/files/%2e%2e/secret.mp4", "/files/..%2fsecret.mp4", "/files/%2Fetc%2Fpasswd.mp4",
                 "/files/sub%5c..%5csecret.mp4", "/files/link.mp4", "/files/linkdir/secret.mp4", "/files//etc/x.mp4",
                 "/files/./link.mp4", f"/files/{'../' * 8}tmp/x.mp4", "/files/%00.mp4"]
        server = ViewerServer(root, host="0.0.0.0", allow_hosts=["viewer.example"]).start()
        port = server.server_address[1]
        rows = []
        try:
            leaks = sum(SECRET in _get(port, p)[1] for p in paths)
            rows.append(("path", len(paths), server.refused["path"], leaks))
            leaks = sum(PAGE in _get(port, f"/files/{n}")[1] for n in pages)
            rows.append(("type", len(pages), server.refused["type"], leaks))
            hosts = ["evil.example", f"evil.example:{port}", f"rebind.attacker.test:{port}", f"viewer.example:{port + 1}",
                     f"127.0.0.1.evil.example:{port}", ""]
            leaks = sum(_get(port, "/api/index", h)[0] == 200 for h in hosts)
            rows.append(("host", len(hosts), server.refused["host"], leaks))
            assert _get(port, f"/files/{clip}", f"viewer.example:{port}")[0] == 200  # the allowed name works
            extra = 8
            connected = time.monotonic()
            idle = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(connections.MAX_PER_CLIENT)]
            time.sleep(0.1)  # younger than DROP_AFTER_S: none of them is dropped for a newcomer
            over = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(extra)]
            answered = sum(s.recv(1) != b"" for s in over)
            rows.append(("connections", connections.MAX_PER_CLIENT + extra, server.refused["connections"], answered))
            idle[0].recv(1)
            held = time.monotonic() - connected
            for s in idle + over:
                s.close()
        finally:
            server.close()
    print(f"{'check':12} {'sent':>5} {'refused':>8} {'got through':>12}")
    for check, sent, refused, leaked in rows:
        print(f"{check:12} {sent:5d} {refused:8d} {leaked:12d}")
    print(f"an idle connection was closed {held:.1f} s after it connected (REQUEST_DEADLINE_S = {connections.REQUEST_DEADLINE_S:g})")


if __name__ == "__main__":
    main()
