"""The worker loop's contract (``envrec.contract.protocol.Handler``): what the loop hands a handler, and when
it gives a record's room back, as the handler's ``ReleasePolicy`` says; the loop runs in this process."""

from __future__ import annotations

import os

import pytest

from envrec.contract.protocol import CheckpointingHandler, Handler, Kind, ReleasePolicy
from envrec.contract.ring import RingWriter, record_size
from envrec.contract.ring_reader import RingReader
from envrec.workers import loop

from .support.worker_loop import Conn

PAYLOAD = b"x" * 100
RECORDS = 5


class Watching(Handler):
    """Notes, at each record, its position and how much of the ring is still held; holds from the second
    record on when its policy lets it (a release point that stops there)."""

    def __init__(self, writer: RingWriter) -> None:
        super().__init__(None)
        self.writer = writer
        self.seen: list[tuple[int, int, int]] = []  # (kind, position, bytes the ring holds)

    def handle(self, rec, position: int) -> bool:
        self.seen.append((rec.kind, position, self.writer.used()))
        return rec.kind == Kind.CLOSE

    def release_point(self, cursor: int) -> int:
        return min(cursor, self.seen[1][1]) if len(self.seen) > 1 else cursor

    def finish(self, clean: bool, terminated_by: str | None = None) -> None:
        pass

    def abort(self, error: str) -> None:
        pass

    def summary(self) -> dict:
        return {"records": len(self.seen)}


class Holding(Watching):
    release = ReleasePolicy.RELEASE_POINT


def _run(handler_cls: type[Watching]) -> tuple[list, int]:
    w = RingWriter(1 << 16)
    r = RingReader(w.spec)
    try:
        for i in range(RECORDS):
            assert w.write(Kind.STEP, 0, i, (PAYLOAD,))
        assert w.write(Kind.CLOSE, 0, 0, (b"",))
        handler = handler_cls(w)
        conn = Conn()
        assert loop.handle_records(r, handler, conn, os.getppid()) is False
        assert conn.last[1]["records"] == RECORDS + 1
        return handler.seen, w.used()
    finally:
        r.close()
        w.close()


@pytest.mark.parametrize("handler_cls", [Watching, Holding])
def test_the_loop_hands_each_record_its_position_and_releases_as_the_policy_says(handler_cls):
    seen, left = _run(handler_cls)
    size = record_size([len(PAYLOAD)])
    total = RECORDS * size + record_size([0])
    assert [(kind, pos) for kind, pos, _ in seen] == [(Kind.STEP, i * size) for i in range(RECORDS)] + [(Kind.CLOSE, RECORDS * size)]
    held = [used for _, _, used in seen]
    if handler_cls.release is ReleasePolicy.HANDLED:  # each record's room back once it was handled
        assert held == [total - i * size for i in range(RECORDS + 1)]
    else:  # up to the release point: the second record on stays held
        assert held == [total, total - size] + [total - size] * (RECORDS - 1)
    assert left == 0  # CLOSE: everything is given back


def test_a_release_policy_that_needs_checkpoints_needs_a_checkpointing_handler():
    with pytest.raises(TypeError, match="checkpoint"):
        type("Claims", (Watching,), {"release": ReleasePolicy.CHECKPOINTED})
    with pytest.raises(TypeError, match="checkpoint"):
        type("Drops", (CheckpointingHandler,), {"release": ReleasePolicy.HANDLED})


def test_a_handler_must_say_how_it_handles_and_ends():
    class Incomplete(Handler):
        def handle(self, rec, position: int) -> bool:
            return False

    with pytest.raises(TypeError, match="abstract"):
        Incomplete(None)  # type: ignore[abstract]
