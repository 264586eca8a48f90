"""What the tests share, one module a job; a test imports what it needs, e.g. ``from .support.episodes import run_episodes``.

* ``batch_json``: a batch's JSON read and rewritten whether it is ``.json`` or ``.json.zst`` (``load_batch``).
* ``episodes``: the episode loop (``run_episodes``, ``episode_lengths``) and the recorder feeder (``feed``).
* ``envs``: small real envs (``SpaceEnv`` for every space shape, ``ColourEnv`` rendering known pictures) and ``Capture``.
* ``processes``: child processes: the environment they inherit (``child_env``), the ``tests/child_*.py``
  programs (``start_child``, ``child_command``) and how those end (``end_as_told``).
* ``scripts``: the repository's ``scripts/`` imported as modules (``load_script``), and recordings written
  through ``scripts/bench/bench_commit.py``'s in-process serializer (``write_segmented``).
* ``video``: decoding clips with ffmpeg, their metadata.
* ``waiting``: polling with a deadline.
* ``worker_loop``: a worker's loop run in the test process.
* ``start_anywhere``, ``syscall_faults``, ``fuzz_mutants``: the helpers of one test file each.

The ``tests/child_*.py`` programs run as scripts, with ``tests/`` first on their path: they import
``support.<module>``. The conftest imports nothing from here: test_leak_checks runs a copy of it alone.
"""
