"""`scripts/setup.sh` is a good citizen: it installs Debian's prometheus with its service held
back by policy-rc.d, removes only the policy file it created, and never kills by name."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "scripts" / "setup.sh"
TOOLS = ("bash", "sha256sum", "cut", "tee", "chmod", "rm", "id", "cat", "dirname", "touch")


def _fake_path(tmp_path: Path) -> Path:
    """A PATH without prometheus/promtool, with an apt-get that records the policy it sees."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    (bin_dir / "python3").symlink_to(sys.executable)
    apt = bin_dir / "apt-get"
    apt.write_text(
        '#!/bin/bash\nif [[ $1 == install ]]; then { echo "install"; cat "$POLICY_RC_D" 2>/dev/null; } >> "$APT_LOG"; fi\n'
    )
    apt.chmod(0o755)
    return bin_dir


def _venv(tmp_path: Path, engine: str) -> Path:
    """A stand-in venv whose install stamp is current, so setup.sh only checks it: the test never
    touches the project's own .venv (on a GPU machine a CPU-engine run would replace its CUDA vLLM)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    (venv / f".kvscope-installed-{engine}-{digest}").touch()
    return venv


def _run(tmp_path: Path, policy: Path) -> subprocess.CompletedProcess[str]:
    engine = os.environ.get("KVSCOPE_ENGINE", "cpu")
    venv = _venv(tmp_path, engine)
    env = {
        "PATH": str(_fake_path(tmp_path)),
        "VENV": str(venv),
        "POLICY_RC_D": str(policy),
        "APT_LOG": str(tmp_path / "apt.log"),
        "KVSCOPE_ENGINE": engine,
    }
    return subprocess.run(["bash", str(SETUP)], env=env, capture_output=True, text=True, timeout=300, check=False)


def test_prometheus_is_installed_with_its_service_held_back_and_the_policy_removed(tmp_path):
    policy = tmp_path / "policy-rc.d"
    result = _run(tmp_path, policy)
    assert result.returncode == 0, result.stderr
    log = (tmp_path / "apt.log").read_text()
    assert log.startswith("install") and "exit 101" in log  # the policy was in place during the install
    assert not policy.exists()  # and the one setup created is gone


def test_a_policy_that_was_there_is_kept(tmp_path):
    policy = tmp_path / "policy-rc.d"
    policy.write_text("#!/bin/sh\n# the admin's own\nexit 101\n")
    assert _run(tmp_path, policy).returncode == 0
    assert "the admin's own" in policy.read_text()


def test_the_projects_venv_is_left_alone(tmp_path):
    before = sorted(p.name for p in (ROOT / ".venv").glob(".kvscope-installed-*")) if (ROOT / ".venv").is_dir() else []
    assert _run(tmp_path, tmp_path / "policy-rc.d").returncode == 0
    after = sorted(p.name for p in (ROOT / ".venv").glob(".kvscope-installed-*")) if (ROOT / ".venv").is_dir() else []
    assert before == after


def test_setup_never_kills_processes_by_name():
    text = SETUP.read_text()
    assert not any(word in text for word in ("pkill", "killall", "kill -"))
