"""A directory of the server's own for vLLM's ZMQ IPC sockets.

vLLM names each IPC socket `ipc://$VLLM_RPC_BASE_PATH/<uuid4>` (default: the system's temporary
directory) and leaves the socket files behind when its processes end: hundreds collect in /tmp
over a day of restarts. `kvscope serve` gives them a directory it creates and removes at exit;
a user's own VLLM_RPC_BASE_PATH is left as it is.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator

VARIABLE = "VLLM_RPC_BASE_PATH"


@contextlib.contextmanager
def private_rpc_dir() -> Iterator[str]:
    """Yields the directory vLLM's IPC sockets go to while the block runs (inherited by the engine
    core and its workers): a new one removed afterwards, or the user's own, untouched."""
    if os.environ.get(VARIABLE):
        yield os.environ[VARIABLE]
        return
    path = tempfile.mkdtemp(prefix="kvscope-serve-rpc-")
    os.environ[VARIABLE] = path
    try:
        yield path
    finally:
        os.environ.pop(VARIABLE, None)
        shutil.rmtree(path, ignore_errors=True)
