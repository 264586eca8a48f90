"""Worker side of vector traces: split each vector record into one trace per sub-env.

One ``Serializer`` per sub-env does the writing (prefix ``PREFIX.envI``); this
module turns each VRESET/VSTEP record into per-sub-env RESET and STEP
records whose sections are slices of the batched arrays (no copy), following the
autoreset mode (see ``envrec.record.vector``).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

import numpy as np

from envrec.contract.protocol import Handler, Kind, SerializerConfig, Status, StatusSink, VectorSerializerConfig
from envrec.contract.records import RST, TraceLayout
from envrec.formats.infos import unpack_info
from envrec.formats.schema import leaf_values
from envrec.formats.ship_ledger import ledger_name

from .serializer import Serializer

__all__ = ["VectorSerializer", "split_info"]


@dataclass
class _View:
    kind: int
    episode: int
    step: int
    sections: list


def split_info(info: dict, i: int, skip: tuple = ()) -> dict:
    """Sub-env ``i``'s entries of a vector info dict (values where its ``_key`` mask is set)."""
    out = {}
    for k, v in info.items():
        if k.startswith("_") or k in skip:
            continue
        mask = info.get("_" + k)
        if mask is not None and not mask[i]:
            continue
        if isinstance(v, dict):
            out[k] = split_info(v, i)
        else:
            try:
                out[k] = v[i]
            except (TypeError, IndexError, KeyError):
                out[k] = v
    return out


class VectorSerializer(Handler):
    """Consumes vector records; one Serializer per recorded sub-env writes the files. No successor takes over
    from it (its sub-serializers keep no checkpoints): a record's room goes back once it is handled.

    A record holds one row per sub-env, or (``cfg.indexed``) the rows its
    ``indices`` section names, with each sub-env's episode count and whether its
    next episode is recorded (``envrec.record.sub_env_selection``).

    Args:
        cfg: what to record and where.
        status: sets the ring's status words (``Status``) for the env process.
    """

    _FINAL = ("final_obs", "final_info")
    cfg: VectorSerializerConfig

    def __init__(self, cfg: VectorSerializerConfig, status: StatusSink | None = None) -> None:
        super().__init__(cfg, status)
        self.subs: dict[int, Serializer] = {}
        for i in range(cfg.num_envs) if cfg.sub_envs is None else cfg.sub_envs:
            self._sub(i)
        layout = TraceLayout.from_specs(cfg.observation_space, cfg.action_space)
        self._obs_leaves = layout.obs_leaves
        self._obs_rows = [leaf.nbytes for leaf in layout.obs_leaves]
        self._act_rows = [leaf.nbytes for leaf in layout.act_leaves]
        self._extra = 3 if cfg.indexed else 0  # the sections indices, episodes, keep
        self.episode = np.full(cfg.num_envs, -1, np.int64)
        self.done = np.zeros(cfg.num_envs, bool)  # next-step mode: the next step of this sub-env is its reset
        # per sub-env: the np_random state its next autoreset starts from, and whether it is inferred (read after
        # the previous reset, same-step mode) rather than read just before it (envrec.record.sub_env_replay)
        self.rng_next: dict[int, tuple[dict, bool]] = {}
        self.records = 0
        self.steps = 0
        self.position = 0  # ring position of the vector record being handled

    def _sub(self, i: int) -> Serializer:
        sub = self.subs.get(i)
        if sub is None:
            cfg = self.cfg
            sub = self.subs[i] = Serializer(
                SerializerConfig(
                    cfg.folder, f"{cfg.prefix}.env{i}", cfg.observation_space, cfg.action_space, cfg.batch_bytes,
                    cfg.env_id, {**cfg.settings, "sub_env": i}, checkpoints=False,
                    compression=cfg.compression, max_bytes=cfg.max_bytes, commit_interval=cfg.commit_interval,
                    folder_id=cfg.folder_id, env=cfg.env,
                    ship_ledger=ledger_name(f"{cfg.prefix}.env{i}", cfg.ship_url) if cfg.ship_url else None,
                )
            )
        return sub

    def _open(self, i: int) -> bool:
        sub = self.subs.get(i)
        return sub is not None and sub.episode_open

    @staticmethod
    def _rows(sections: list, row_bytes: list[int], k: int) -> list:
        return [mv[k * n : (k + 1) * n] for mv, n in zip(sections, row_bytes, strict=True)]

    def _reset(self, i: int, episode: int, obs_sections: list, meta: bytes, info: dict, step: int) -> None:
        self.episode[i] = episode
        self.done[i] = False
        sections = [*obs_sections, meta, pickle.dumps(info, protocol=5) if info else b""]
        self._sub(i).handle(_View(Kind.RESET, episode, step, sections), self.position)

    def _step(self, i: int, act_sections, obs_sections, reward, term, trunc, info: dict, step: int) -> None:
        if not self._open(i):
            return
        rst = RST.pack(float(reward), bool(term), bool(trunc))
        sections = [rst, *act_sections, *obs_sections, pickle.dumps(info, protocol=5) if info else b""]
        self.subs[i].handle(_View(Kind.STEP, int(self.episode[i]), step, sections), self.position)
        self.steps += 1

    def _end(self, i: int) -> None:
        """Sub-env ``i``'s recorded episode is over and its next one is not recorded."""
        if self._open(i):
            self.subs[i].end_episode()
        self.done[i] = False
        self.rng_next.pop(i, None)

    def _index(self, sections: list, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The rows' sub-envs, episode counts and keep flags (this worker's own count when not indexed)."""
        if not self.cfg.indexed:
            idx = np.arange(count)
            return idx, self.episode[idx] + 1, np.ones(count, bool)
        return (np.frombuffer(sections[0], "<i8"), np.frombuffer(sections[1], "<i8"), np.frombuffer(sections[2], bool))

    def handle(self, rec, position: int) -> bool:
        self.position = position  # the vector record's, for its sub-records (their serializers keep no checkpoint)
        self.records += 1
        if rec.kind == Kind.CLOSE:
            self.finish(clean=True)
            return True
        if rec.kind == Kind.VRESET:
            self._vreset(rec)
        elif rec.kind == Kind.VSTEP:
            self._vstep(rec)
        else:
            raise ValueError(f"unknown record kind {rec.kind} in the vector trace ring")
        self._status(Status.RECORDS, self.records)
        self._status(Status.STEPS, self.steps)
        return False

    def _vreset(self, rec) -> None:
        x, n_obs = self._extra, len(self._obs_rows)
        body = rec.sections[x:] if x else rec.sections[1:]
        obs = body[:n_obs]
        meta = unpack_info(body[n_obs])
        info = unpack_info(body[n_obs + 1])
        seed, options = meta.get("seed"), meta.get("options")
        rng, after = meta.get("rng") or {}, meta.get("rng_next") or {}
        self.rng_next.update((i, (state, True)) for i, state in after.items())
        if x:
            idx, episodes, keep = self._index(rec.sections, 0)
            rows = range(len(idx))
        else:
            mask = np.frombuffer(rec.sections[0], bool)
            idx, episodes, keep = self._index(rec.sections, len(mask))
            rows = np.flatnonzero(mask)  # type: ignore[assignment]
        for k in rows:
            i = int(idx[k])
            if not keep[k]:
                self._end(i)
                continue
            s = seed[i] if isinstance(seed, (list, tuple)) else (seed + i if isinstance(seed, int) else None)
            o = options[i] if isinstance(options, (list, tuple)) else options  # one per sub-env (SB3), or one for all
            sub_meta = pickle.dumps({"seed": s, "options": o or None, "rng": rng.get(i) if s is None else None}, protocol=5)
            self._reset(i, int(episodes[k]), self._rows(obs, self._obs_rows, k), sub_meta, split_info(info, k), rec.step)

    def _vstep(self, rec) -> None:
        x, n_act, n_obs = self._extra, len(self._act_rows), len(self._obs_rows)
        body = rec.sections[x:]
        acts = body[:n_act]
        obs = body[n_act : n_act + n_obs]
        rewards = np.frombuffer(body[n_act + n_obs], "<f8")
        terms = np.frombuffer(body[n_act + n_obs + 1], bool)
        truncs = np.frombuffer(body[n_act + n_obs + 2], bool)
        info = unpack_info(body[n_act + n_obs + 3])
        ended_rng = unpack_info(body[n_act + n_obs + 4]) if len(body) > n_act + n_obs + 4 else {}
        idx, episodes, keep = self._index(rec.sections, len(rewards))
        step = rec.step
        mode = self.cfg.autoreset_mode
        if mode == "NextStep":
            self.rng_next.update((i, (state, False)) for i, state in ended_rng.items())
        for k in range(len(idx)):
            i = int(idx[k])
            a_k = self._rows(acts, self._act_rows, k)
            o_k = self._rows(obs, self._obs_rows, k)
            ended = bool(terms[k] or truncs[k])
            if mode == "NextStep" and self.done[i]:
                self._reset(i, int(episodes[k]), o_k, self._autoreset_meta(i), split_info(info, k), step)  # its action was ignored
                continue
            if mode == "SameStep" and ended:
                self._same_step_end(i, k, a_k, o_k, rewards[k], terms[k], truncs[k], info, step, int(episodes[k]), keep[k])
                if i in ended_rng:
                    self.rng_next[i] = (ended_rng[i], True)
                continue
            self._step(i, a_k, o_k, rewards[k], terms[k], truncs[k], split_info(info, k), step)
            if ended and mode == "NextStep":
                if keep[k]:
                    self.done[i] = True
                else:
                    self._end(i)

    def _same_step_end(self, i, k, a_k, o_k, reward, term, trunc, info, step, episode: int, keep: bool) -> None:
        """The step that ended sub-env ``i``'s episode, then (if recorded) the next episode's reset, in one row.

        Without ``final_obs`` in the info (simulators that give no terminal observation), the step
        carries the observation returned, which is the next episode's first.
        """
        if "final_obs" in info:
            final_obs = [
                np.ascontiguousarray(np.asarray(v, dtype=np.dtype(leaf.dtype))).data.cast("B")
                for v, leaf in zip(leaf_values(info["final_obs"][k], self.cfg.observation_space), self._obs_leaves, strict=True)
            ]
            final_info = split_info(info["final_info"], k) if "final_info" in info else {}
        else:
            final_obs, final_info = o_k, split_info(info, k)
        self._step(i, a_k, final_obs, reward, term, trunc, final_info, step)
        if keep:
            self._reset(i, episode, o_k, self._autoreset_meta(i), split_info(info, k, skip=self._FINAL), step)
        else:
            self._end(i)

    def _autoreset_meta(self, i: int) -> bytes:
        """The meta of sub-env ``i``'s autoreset: no seed, and the np_random state it starts from when one was read."""
        found = self.rng_next.pop(i, None)
        if found is None:
            return _NO_META
        state, inferred = found
        return pickle.dumps({"seed": None, "options": None, "rng": state, "rng_inferred": inferred or None}, protocol=5)

    def idle_in(self) -> float | None:
        due = [d for sub in self.subs.values() if (d := sub.idle_in()) is not None]
        return min(due) if due else None

    def on_idle(self, cursor: int) -> None:
        for sub in self.subs.values():
            if (d := sub.idle_in()) is not None and d <= 0:
                sub.on_idle(cursor)

    def finish(self, clean: bool, terminated_by: str | None = None) -> None:
        for sub in self.subs.values():
            sub.records_not_drained = self.records_not_drained  # the shared ring's: each sub-env's manifest says it
            sub.finish(clean, terminated_by)

    def abort(self, error: str) -> None:
        for sub in self.subs.values():
            sub.abort(error)

    def summary(self) -> dict[str, Any]:
        per_env = [sub.summary() for sub in self.subs.values()]
        return {
            "sub_envs": len(per_env),
            "episodes": sum(s["episodes"] for s in per_env),
            "steps": sum(s["steps"] for s in per_env),
            "batches": sum(s["batches"] for s in per_env),
            "bytes": sum(s["bytes"] for s in per_env),
            "records": self.records,
            "error": next((s["error"] for s in per_env if s["error"]), None),
        }


_NO_META = pickle.dumps({"seed": None, "options": None}, protocol=5)
