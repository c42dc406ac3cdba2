"""Where profiles, probes and collectives are kept: a folder given, else this host's own."""

from __future__ import annotations

import platform
import re
from pathlib import Path

from parbench.advisor.profiling.record_profiles import DEFAULT_CACHE
from parbench.commands.arguments import UsageError

__all__ = ["host_cache", "profile_cache"]


def host_cache() -> Path:
    """The default folder of profiles, probes and collectives: one per host under
    DEFAULT_CACHE, since each measures the host that took it (a home folder a cluster's nodes
    share would otherwise hand one node's to another)."""
    return DEFAULT_CACHE / (re.sub(r"[^A-Za-z0-9._-]+", "-", platform.node()) or "host")


def profile_cache(path: Path | None) -> Path:
    """The folder profiles are kept in (given, else this host's: `host_cache`), refused where
    it, or a folder above it, is a file."""
    cache = path or host_cache()
    existing = next(folder for folder in (cache, *cache.parents) if folder.exists())
    if not existing.is_dir():
        raise UsageError(f"--profile-cache {cache}: {existing} is a file, not a folder; give a "
                         f"folder to keep the profiles in (made if missing), e.g. {host_cache()}")
    return cache
