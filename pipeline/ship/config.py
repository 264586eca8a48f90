"""What a shipper process is told when it starts (pickled by the env process, as workers' configs are)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..formats.store import redact
from ..option_checks import seconds_from_env
from .shipping import ShipTargets

__all__ = ["DEADLINE_ENV_VAR", "FINISH", "SHIP_DEADLINE_S", "ShipConfig", "ShipLaunch", "ship_deadline_s"]

FINISH = b"f"  # what the env process writes on the control pipe before closing it at close()
SHIP_DEADLINE_S = 25.0  # after close() or SIGTERM: what is left unshipped this long after stays local
DEADLINE_ENV_VAR = "ENVREC_SHIP_DEADLINE_S"


def ship_deadline_s() -> float:
    """``SHIP_DEADLINE_S``, or ``ENVREC_SHIP_DEADLINE_S`` from the environment when it is a positive number."""
    return seconds_from_env(DEADLINE_ENV_VAR, SHIP_DEADLINE_S)


@dataclass(frozen=True)
class ShipConfig:
    """A recorder's shipper.

    Args:
        folder: the local folder it ships from.
        url: where to (an fsspec URL or a path).
        storage_options: fsspec's options (credentials stay in the pickled config: never on a command line).
        targets: which recordings and clips.
        folder_id: the folder's (st_dev, st_ino) as the recorder opened it.
    """

    folder: str
    url: str
    storage_options: dict[str, Any] | None = field(default=None, repr=False)  # credentials: never printed
    targets: ShipTargets = field(default_factory=ShipTargets)
    folder_id: tuple[int, int] | None = None

    @property
    def url_display(self) -> str:
        return redact(self.url)


@dataclass(frozen=True)
class ShipLaunch:
    """A shipper process's start: its config and the descriptors it inherits (valid at these numbers in it)."""

    config: ShipConfig
    counters_fd: int  # the memfd of its ShipCounters
    control_fd: int  # the read end of the control pipe: end of file when the env process closes or dies
