"""Shared fixtures. Integration tests share one real vLLM engine per test session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from drill.launcher import ServerProcess, running, vllm_openai_server
from serving.demo_model import SERVED_NAME, ensure_demo_model


@pytest.fixture(scope="session")
def demo_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo model, generated once per session into the user's cache."""
    return ensure_demo_model()


@pytest.fixture(scope="session")
def vllm_server(demo_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """vLLM's own OpenAI server on the demo model, started once for every test that needs it."""
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    server = vllm_openai_server(demo_model_path, log, served_name=SERVED_NAME)
    with running(server, timeout=240) as ready:
        yield ready
