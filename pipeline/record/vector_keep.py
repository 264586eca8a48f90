"""``RecordVectorVideo``'s ``keep_if``: each recorded sub-env's episode outcome, from the vector step's batched values.

One ``OutcomeTracker`` per recorded sub-env adds up its return and length
and keeps its last ``terminated``, ``truncated`` and info (the sub-env's
slice of the batched info: its entries whose ``_KEY`` mask is set; on a
same-step autoreset the episode's last info is ``info["final_info"]``'s
slice, the top level being the next episode's reset info). A ``ClipKeeper``
(``envrec.keep.best(k)``) ranks the clips of every recorded sub-env together
— the k best of the run — and discards through ``SubEnvOutcomes.discard_clip``,
which hands the name to the recorder that made the clip.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .clip_triggers import ClipKeeper, KeepIf, OutcomeTracker, decide

if TYPE_CHECKING:  # pragma: no cover
    from .video_recorder import VideoRecorder

__all__ = ["SubEnvOutcomes", "sub_info"]


def sub_info(info: Any, j: int) -> dict:
    """Sub-env ``j``'s info from a vector env's batched info (``{key: array, "_key": mask}``, nested for
    ``final_info``); an entry that cannot be indexed by sub-env is left out."""
    if not isinstance(info, dict):
        return {}
    out = {}
    for key, value in info.items():
        if not isinstance(key, str) or key.startswith("_"):
            continue
        mask = info.get("_" + key)
        try:
            if mask is not None and not mask[j]:
                continue
            out[key] = sub_info(value, j) if isinstance(value, dict) else value[j]
        except (IndexError, KeyError, TypeError):
            continue
    return out


class SubEnvOutcomes:
    """The episode outcomes of the recorded sub-envs, and the ``ClipDiscarder`` of a keeper ranking all their clips.

    Args:
        keep_if: ``keep_if(outcome) -> bool``, asked when a sub-env's clip ends.
        recorders: the recorder of each recorded sub-env, by index; closed if the keeper refuses to attach.

    Raises:
        ConfigError: ``keep_if`` is a keeper attached to another recorder already.
    """

    def __init__(self, keep_if: KeepIf, recorders: dict[int, VideoRecorder]) -> None:
        self.keep_if = keep_if
        self.recorders = recorders
        self.trackers = {j: OutcomeTracker() for j in recorders}
        self._owner: dict[str, int] = {}  # a kept clip's name -> its sub-env (a ranked keeper may discard it)
        if isinstance(keep_if, ClipKeeper):
            try:
                keep_if.attach(self)
            except BaseException:
                for rec in recorders.values():
                    rec.close()  # no encoder left running
                raise

    def reset(self, j: int, episode_id: int, info: Any) -> None:
        self.trackers[j].reset(episode_id, sub_info(info, j))

    def step(self, j: int, reward: Any, terminated: Any, truncated: Any, info: Any, *, same_step: bool) -> None:
        """One vector step of sub-env ``j`` (``same_step``: the vector env autoresets in the step that ends an
        episode, whose last info is then in ``info["final_info"]``)."""
        ended = bool(terminated) or bool(truncated)
        last = sub_info(info.get("final_info") if same_step and ended else info, j)
        self.trackers[j].step(reward, bool(terminated), bool(truncated), last)

    def decide(self, j: int) -> bool:
        """Whether sub-env ``j``'s current clip, about to end, is kept."""
        clip = self.recorders[j].clip
        name = clip.name if clip is not None else None
        keep = decide(self.keep_if, self.trackers[j].outcome(name))
        if keep and name is not None and isinstance(self.keep_if, ClipKeeper):
            self._owner[name] = j
        return keep

    def discard_clip(self, name: str) -> None:
        """A keeper let clip ``name`` go: its recorder deletes it once finished (``VideoRecorder.discard_clip``).

        Args:
            name: the clip's name.
        """
        j = self._owner.pop(name, None)
        if j is not None:
            self.recorders[j].discard_clip(name)
