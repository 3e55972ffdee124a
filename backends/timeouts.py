"""Every wait of the backends in one place: how often a waiting caller looks up, how long closing waits.

The numbers that serve one purpose used to differ from file to file (a 0.02 s poll beside a 0.05 s
one, a 10 s close beside a 30 s one, for the same engine).  They are named here once, each with the
reason for its size, and every poll-and-cancel loop and every close uses these.  The chat's own
settings (``server.connect_timeout`` and the like) default to the ``REMOTE_*`` values below.
"""
from __future__ import annotations

#: how often a caller waiting for the next id re-checks its cancel flag (and a remote turn its
#: deadlines), in seconds: short enough that Esc stops a reply within one frame of the TUI (~1/30 s),
#: long enough that an idle wait costs nothing measurable.  One value for every loop that hands ids
#: across a thread (:mod:`backends.handoff`): the engine's worker thread, the engine pipe's reader,
#: a remote server's stream reader.
POLL_S = 0.02

#: how long closing waits for an engine to finish its current step and end by itself, in seconds,
#: before it is given up (a thread: left to end on its own) or killed (a process).  An engine checks
#: its cancel flag between ids and llama.cpp between prompt batches, so a healthy one ends within a
#: second; one that has not after this long is stuck in one native call.  The same value for the
#: engine's thread (:mod:`backends.worker`), its process (:mod:`backends.engine_client`) and the
#: exit hook that closes what a caller forgot.
ENGINE_CLOSE_S = 10.0

#: how long a hardware tool (nvidia-smi, rocminfo, vulkaninfo, an engine's --version) may take
#: before detection goes on without its answer, in seconds: each answers in well under a second on
#: a healthy machine; a hung driver must not hold up the chat's start for long.
TOOL_S = 5.0

#: the default wait to reach a remote server, and for every answer that is not generation, in
#: seconds (``server.connect_timeout``): a server on the network answers a metadata request at once.
REMOTE_CONNECT_S = 10.0
#: the default wait for a remote reply's first id, in seconds (``server.first_token_timeout``): the
#: server may be evaluating a long prompt on a slow machine or queueing behind other users.
REMOTE_FIRST_TOKEN_S = 300.0
#: the default longest silence between two ids of a remote reply, in seconds (``server.idle_timeout``).
REMOTE_IDLE_S = 60.0
