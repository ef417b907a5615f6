"""thermal_power_throttling: clocks held below base by the power cap or temperature while the
GPU is busy (seed 004: the BMC cut 1.4 to 1.1 GHz, P99 jitter followed)."""

from __future__ import annotations

from diagnosis.checks import Context, evidence, labels_of, value
from diagnosis.findings import Finding, Severity, affected, describe
from kvscope import thresholds as t
from kvscope.gpu_models import lookup
from kvscope.thresholds import Threshold


def check(ctx: Context) -> Finding | None:
    hits = []
    for view in ctx.gpus.values():
        if (value(view, "gpu_util_avg") or 0) < t.GPU_UTIL_FLOOR.value:
            continue  # idle GPUs drop their clocks by design
        reasons = {v.labels.get("reason"): v.value for v in view.get("throttle_active", [])}
        active = {r: share for r, share in reasons.items() if share >= t.THROTTLE_SHARE.value}
        model = lookup(labels_of(view).get("modelName"))
        clock = value(view, "sm_clock_avg")
        base = value(view, "app_sm_clock") or (model.base_sm_clock if model else None)
        slow = clock is not None and base and clock < t.CLOCK_BELOW_BASE.value * base
        power = value(view, "power_avg")
        limit = value(view, "power_limit") or (model.tdp_w if model else None)
        at_power_cap = power is not None and limit and power >= t.POWER_AT_LIMIT.value * limit
        temp = value(view, "temp_max")
        slowdown = value(view, "slowdown_temp") or (model.slowdown_temp if model else None)
        hot_limit = min(slowdown or t.GPU_TEMP_HIGH.value, t.GPU_TEMP_HIGH.value)
        hot = temp is not None and temp >= hot_limit
        if active or (slow and (at_power_cap or hot)):
            hits.append((view, active, slow, at_power_cap, hot))
    if not hits:
        return None
    view, active, slow, at_power_cap, hot = hits[0]
    thermal = hot or any("thermal" in (r or "") for r in active)
    ev = []
    if view.get("throttle_active"):
        ev += [
            evidence({"throttle_active": [v]}, "throttle_active", t.THROTTLE_SHARE)
            for v in view["throttle_active"]
            if v.value >= t.THROTTLE_SHARE.value
        ]
    limits: tuple[tuple[str, Threshold | None], ...] = (
        ("sm_clock_avg", None),
        ("app_sm_clock", None),
        ("temp_max", t.GPU_TEMP_HIGH),
        ("power_avg", None),
        ("power_limit", None),
    )
    for name, bound in limits:
        if view.get(name):
            ev.append(evidence(view, name, bound))
    cause = "temperature" if thermal else "the power cap"
    model = lookup(labels_of(view).get("modelName"))
    base = value(view, "app_sm_clock") or (model.base_sm_clock if model else 0)
    clock_text = (
        f"SM clock {value(view, 'sm_clock_avg'):.0f} MHz vs base {base:.0f} MHz" if slow else "clocks held down"
    )
    return Finding(
        id="thermal_power_throttling",
        severity=Severity.CRITICAL
        if (value(view, "temp_max") or 0) >= (value(view, "slowdown_temp") or 999)
        else Severity.WARNING,
        confidence=0.6 + (0.2 if active else 0) + (0.15 if slow else 0),
        summary=f"{describe(labels_of(view))} is throttled by {cause}: {clock_text}"
        + (f", {value(view, 'temp_max'):.0f} C" if thermal and view.get("temp_max") else "")
        + "; latency and throughput follow the clock.",
        affected=[affected(labels_of(v)) for v, *_ in hits],
        evidence=ev,
        remediation=(
            [
                "check cooling: fans, airflow, inlet temperature (nvidia-smi -q -d TEMPERATURE,PERFORMANCE)",
                "move load off the hot GPU until it is fixed",
            ]
            if thermal
            else [
                "check the enforced limit: nvidia-smi -q -d POWER; restore the default with nvidia-smi -pl <watts>",
                "if the rack's power budget forces a cap, set it deliberately below the throttle point and lower "
                "--max-num-batched-tokens to match (seed 004: -pl 280 + 1024 gave stable P99)",
            ]
        ),
    )
