"""This process's limit of open files and its resident set, for figures that open many
sockets or report memory (figure 6). The resident set is read from ``/proc`` (Linux only:
elsewhere it is None)."""

from __future__ import annotations

import contextlib
import resource

__all__ = ["raise_fd_limit", "reset_peak_rss", "status_bytes"]


def raise_fd_limit(needed: int) -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` towards ``needed``; the new soft limit.

    Processes spawned afterwards (the servers', the samples') inherit it.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return needed
    if hard != resource.RLIM_INFINITY:
        needed = min(needed, hard)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
        soft = needed
    return int(soft)


def status_bytes(field: str) -> int | None:
    """``field`` of /proc/self/status (``VmRSS``, ``VmHWM``) in bytes; None off Linux."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def reset_peak_rss() -> None:
    """Reset ``VmHWM`` to the current resident set (Linux 4.0+; else it stays as it is:
    the run's peak is higher than the warm-up's anyway)."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
