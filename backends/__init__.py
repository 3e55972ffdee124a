"""Inference backends behind one Protocol: token ids in, token ids out.

``open_backend`` (added by the backends issue) detects the hardware and
returns a loaded backend; :mod:`backends.base` holds the contract.
"""
from backends.base import Backend, BackendError, BackendInfo, LoadOptions, SamplingParams

__all__ = ["Backend", "BackendError", "BackendInfo", "LoadOptions", "SamplingParams"]
