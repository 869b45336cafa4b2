"""The monitor-mode sections: ``[services]`` (``netmon up``'s supervisor) and ``[metrics]`` (``/metrics``).

Like every section, each is a frozen, keyword-only dataclass that checks its values when it is
built; errors are one line naming the section and key.
"""

from __future__ import annotations

from dataclasses import dataclass

from netmon.config.checks import expect, port, positive

__all__ = ["MetricsConfig", "ServicesConfig"]


@dataclass(frozen=True, kw_only=True)
class ServicesConfig:
    """How ``netmon up`` supervises its child processes: ``[services]``."""

    #: wait before the first restart of a child that died; doubled at each death in a row
    restart_backoff_s: float = 1.0
    #: the longest wait between two restarts
    restart_backoff_max_s: float = 60.0
    #: a child that ran this long before dying is restarted after ``restart_backoff_s`` again
    stable_s: float = 60.0
    #: how long a child may take to stop after SIGTERM before its process group is killed
    #: (the pipeline finishes its running batch first: ``pipeline.job.STOP_GRACE_S`` is 30 s)
    stop_timeout_s: float = 45.0
    #: seconds between two checks of the children (and two status-file writes)
    poll_s: float = 1.0
    #: run the dashboard and the alert service too
    dashboard: bool = True
    alerts: bool = True

    def __post_init__(self) -> None:
        where = "[services]"
        for key in ("restart_backoff_s", "stable_s", "stop_timeout_s", "poll_s"):
            positive(where, key, getattr(self, key))
        positive(where, "restart_backoff_max_s", self.restart_backoff_max_s)
        expect(
            self.restart_backoff_max_s >= self.restart_backoff_s,
            where,
            "restart_backoff_max_s",
            f"a number >= restart_backoff_s = {self.restart_backoff_s:g}",
            self.restart_backoff_max_s,
        )


@dataclass(frozen=True, kw_only=True)
class MetricsConfig:
    """The Prometheus endpoint ``netmon up`` serves: ``[metrics]``."""

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = 9464

    def __post_init__(self) -> None:
        expect(bool(self.host.strip()), "[metrics]", "host", "a host name or address", self.host)
        port("[metrics]", "port", self.port)
