"""The names of an env's discrete actions, for the manifest's ``env.action_meanings`` (the viewer labels plots with them).

The hook is the env's ``get_action_meanings()`` method, which ALE's envs have
(``["NOOP", "FIRE", "RIGHT", ...]``) and any env may define: Gymnasium's
``get_wrapper_attr`` finds it on a wrapper or on the unwrapped env. It is
asked once, when the recorder is built. Only a ``Discrete`` action space gets
names, and only a list of exactly ``n`` strings is kept; a hook that raises or
returns anything else is logged and ignored: the recording goes on without
names (the viewer then labels actions ``0..n-1``).
"""

from __future__ import annotations

import logging

import gymnasium as gym

__all__ = ["MAX_NAME_CHARS", "action_meanings"]

logger = logging.getLogger(__name__)

MAX_NAME_CHARS = 64  # a name longer than this is cut: it is a plot label, not a document
HOOK = "get_action_meanings"


def action_meanings(env: gym.Env) -> list[str] | None:
    """The names of ``env``'s discrete actions, action ``start + i`` named by entry ``i``, or None.

    Args:
        env: the env as the recorder wraps it; its action space must be ``Discrete`` and it (or a
            wrapper of it) must have a ``get_action_meanings()`` method returning ``n`` strings.
    """
    space = env.action_space
    if not isinstance(space, gym.spaces.Discrete):
        return None
    try:
        hook = env.get_wrapper_attr(HOOK)
    except AttributeError:
        return None
    if not callable(hook):
        return None
    try:
        names = list(hook())
    except Exception as exc:  # noqa: BLE001  (a user's hook must not stop the user's job)
        logger.warning("envrec: %s() of %s raised %r; its actions are recorded without names", HOOK, env, exc)
        return None
    if len(names) != int(space.n) or not all(isinstance(n, str) for n in names):
        logger.warning("envrec: %s() of %s gave %d entries for Discrete(%d), not one string per action; "
                       "its actions are recorded without names", HOOK, env, len(names), int(space.n))
        return None
    return [n[:MAX_NAME_CHARS] for n in names]
