"""Guards of the hardening suite: an address-space cap, so a reader that trusts an inflated length
fails with MemoryError instead of eating the machine."""
from __future__ import annotations
import resource
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator
from support.process_env import child_env  # noqa: F401 (re-exported to the tests here)


ROOT = Path(__file__).resolve().parents[2]


def vm_size() -> int:
    """This process's virtual memory size in bytes (Linux)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[0]) * resource.getpagesize()


@contextmanager
def address_space_cap(extra_bytes: int) -> Iterator[None]:
    """Any allocation that would take this process ``extra_bytes`` past where it is now fails.

    A reader that trusts an inflated length then raises MemoryError (not one
    of the allowed errors) instead of quietly eating the machine.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm_size() + extra_bytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
