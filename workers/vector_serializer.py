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
    """Consumes vector records; one Serializer per sub-env writes the files. No successor takes over from
    it (its sub-serializers keep no checkpoints): a record's room goes back once it is handled.

    Args:
        cfg: what to record and where.
        status: sets the ring's status words (``Status``) for the env process.
    """

    _FINAL = ("final_obs", "final_info")
    cfg: VectorSerializerConfig

    def __init__(self, cfg: VectorSerializerConfig, status: StatusSink | None = None) -> None:
        super().__init__(cfg, status)
        self.subs = [
            Serializer(
                SerializerConfig(
                    cfg.folder, f"{cfg.prefix}.env{i}", cfg.observation_space, cfg.action_space, cfg.batch_bytes,
                    cfg.env_id, {**cfg.settings, "sub_env": i}, checkpoints=False,
                    compression=cfg.compression, max_bytes=cfg.max_bytes, commit_interval=cfg.commit_interval,
                    folder_id=cfg.folder_id,
                    ship_ledger=ledger_name(f"{cfg.prefix}.env{i}", cfg.ship_url) if cfg.ship_url else None,
                )
            )
            for i in range(cfg.num_envs)
        ]
        layout = TraceLayout.from_specs(cfg.observation_space, cfg.action_space)
        self._obs_leaves = layout.obs_leaves
        self._obs_rows = [leaf.nbytes for leaf in layout.obs_leaves]
        self._act_rows = [leaf.nbytes for leaf in layout.act_leaves]
        self.episode = [-1] * cfg.num_envs
        self.done = [False] * cfg.num_envs  # next-step mode: the next step of this sub-env is its reset
        self.records = 0
        self.steps = 0
        self.position = 0  # ring position of the vector record being handled

    @staticmethod
    def _rows(sections: list, row_bytes: list[int], i: int) -> list:
        return [mv[i * n : (i + 1) * n] for mv, n in zip(sections, row_bytes, strict=True)]

    def _reset(self, i: int, obs_sections: list, meta: bytes, info: dict, step: int) -> None:
        self.episode[i] += 1
        sections = [*obs_sections, meta, pickle.dumps(info, protocol=5) if info else b""]
        self.subs[i].handle(_View(Kind.RESET, self.episode[i], step, sections), self.position)

    def _step(self, i: int, act_sections, obs_sections, reward, term, trunc, info: dict, step: int) -> None:
        if self.episode[i] < 0:
            return
        rst = RST.pack(float(reward), bool(term), bool(trunc))
        sections = [rst, *act_sections, *obs_sections, pickle.dumps(info, protocol=5) if info else b""]
        self.subs[i].handle(_View(Kind.STEP, self.episode[i], step, sections), self.position)
        self.steps += 1

    def handle(self, rec, position: int) -> bool:
        self.position = position  # the vector record's, for its sub-records (their serializers keep no checkpoint)
        self.records += 1
        if rec.kind == Kind.CLOSE:
            self.finish(clean=True)
            return True
        n, n_obs, n_act = self.cfg.num_envs, len(self._obs_rows), len(self._act_rows)
        if rec.kind == Kind.VRESET:
            mask = np.frombuffer(rec.sections[0], bool)
            obs = rec.sections[1 : 1 + n_obs]
            meta = unpack_info(rec.sections[1 + n_obs])
            info = unpack_info(rec.sections[2 + n_obs])
            seed, options = meta.get("seed"), meta.get("options")
            for i in range(n):
                if not mask[i]:
                    continue
                s = seed[i] if isinstance(seed, (list, tuple)) else (seed + i if isinstance(seed, int) else None)
                o = options[i] if isinstance(options, (list, tuple)) else options  # one per sub-env (SB3), or one for all
                sub_meta = pickle.dumps({"seed": s, "options": o or None}, protocol=5)
                self.done[i] = False
                self._reset(i, self._rows(obs, self._obs_rows, i), sub_meta, split_info(info, i), rec.step)
        elif rec.kind == Kind.VSTEP:
            acts = rec.sections[:n_act]
            obs = rec.sections[n_act : n_act + n_obs]
            rewards = np.frombuffer(rec.sections[n_act + n_obs], "<f8")
            terms = np.frombuffer(rec.sections[n_act + n_obs + 1], bool)
            truncs = np.frombuffer(rec.sections[n_act + n_obs + 2], bool)
            info = unpack_info(rec.sections[n_act + n_obs + 3])
            self._vstep(rec.step, acts, obs, rewards, terms, truncs, info)
        else:
            raise ValueError(f"unknown record kind {rec.kind} in the vector trace ring")
        self._status(Status.RECORDS, self.records)
        self._status(Status.STEPS, self.steps)
        return False

    def _vstep(self, step, acts, obs, rewards, terms, truncs, info) -> None:
        mode = self.cfg.autoreset_mode
        no_meta = pickle.dumps({"seed": None, "options": None}, protocol=5)
        for i in range(self.cfg.num_envs):
            a_i = self._rows(acts, self._act_rows, i)
            o_i = self._rows(obs, self._obs_rows, i)
            ended = bool(terms[i] or truncs[i])
            if mode == "NextStep" and self.done[i]:
                self.done[i] = False  # this step was the sub-env's reset; its action was ignored
                self._reset(i, o_i, no_meta, split_info(info, i), step)
                continue
            if mode == "SameStep" and ended and "final_obs" in info:
                final_obs = [
                    np.ascontiguousarray(np.asarray(v, dtype=np.dtype(leaf.dtype))).data.cast("B")
                    for v, leaf in zip(leaf_values(info["final_obs"][i], self.cfg.observation_space), self._obs_leaves, strict=True)
                ]
                final_info = split_info(info["final_info"], i) if "final_info" in info else {}
                self._step(i, a_i, final_obs, rewards[i], terms[i], truncs[i], final_info, step)
                self._reset(i, o_i, no_meta, split_info(info, i, skip=self._FINAL), step)
                continue
            self._step(i, a_i, o_i, rewards[i], terms[i], truncs[i], split_info(info, i), step)
            self.done[i] = ended

    def idle_in(self) -> float | None:
        due = [d for sub in self.subs if (d := sub.idle_in()) is not None]
        return min(due) if due else None

    def on_idle(self, cursor: int) -> None:
        for sub in self.subs:
            if (d := sub.idle_in()) is not None and d <= 0:
                sub.on_idle(cursor)

    def finish(self, clean: bool, terminated_by: str | None = None) -> None:
        for sub in self.subs:
            sub.records_not_drained = self.records_not_drained  # the shared ring's: each sub-env's manifest says it
            sub.finish(clean, terminated_by)

    def abort(self, error: str) -> None:
        for sub in self.subs:
            sub.abort(error)

    def summary(self) -> dict[str, Any]:
        per_env = [sub.summary() for sub in self.subs]
        return {
            "sub_envs": len(per_env),
            "episodes": sum(s["episodes"] for s in per_env),
            "steps": sum(s["steps"] for s in per_env),
            "batches": sum(s["batches"] for s in per_env),
            "bytes": sum(s["bytes"] for s in per_env),
            "records": self.records,
            "error": next((s["error"] for s in per_env if s["error"]), None),
        }
