"""thermal_power_throttling: clocks held below base by the power cap or temperature while the
GPU is busy (seed 004: the BMC cut 1.4 to 1.1 GHz, P99 jitter followed)."""

from __future__ import annotations

from diagnosis.checks import Context, Hit, Parts, View, evidence, labels_of, one_finding, value
from diagnosis.findings import Evidence, Finding, Severity
from kvscope import thresholds as t


def check(ctx: Context) -> Finding | None:
    share_limit = ctx.limit(t.THROTTLE_SHARE)

    def judge(view: View) -> Hit | None:
        if (value(view, "gpu_util_avg") or 0) < ctx.limit(t.GPU_UTIL_FLOOR):
            return None  # idle GPUs drop their clocks by design
        reasons = {v.labels.get("reason"): v.value for v in view.get("throttle_active", [])}
        active = {r: share for r, share in reasons.items() if share >= share_limit}
        model = ctx.models.lookup(labels_of(view).get("modelName"))
        clock = value(view, "sm_clock_avg")
        base = value(view, "app_sm_clock") or (model.base_sm_clock if model else None)
        slow = bool(clock is not None and base and clock < ctx.limit(t.CLOCK_BELOW_BASE) * base)
        power = value(view, "power_avg")
        limit = value(view, "power_limit") or (model.tdp_w if model else None)
        at_power_cap = bool(power is not None and limit and power >= ctx.limit(t.POWER_AT_LIMIT) * limit)
        temp = value(view, "temp_max")
        slowdown = value(view, "slowdown_temp") or (model.slowdown_temp if model else None)
        hot_limit = min(slowdown or ctx.limit(t.GPU_TEMP_HIGH), ctx.limit(t.GPU_TEMP_HIGH))
        hot = temp is not None and temp >= hot_limit
        if active or (slow and (at_power_cap or hot)):
            facts = {"active": active, "slow": slow, "hot": hot, "base": base}
            return Hit(view, (1 if active else 0) + (1 if slow else 0), facts)
        return None

    def describe(worst: Hit, hits: list[Hit]) -> Parts:
        view, f = worst.view, worst.facts
        thermal = f["hot"] or any("thermal" in (r or "") for r in f["active"])
        ev: list[Evidence] = [
            evidence({"throttle_active": [v]}, "throttle_active", share_limit)
            for v in view.get("throttle_active", [])
            if v.value >= share_limit
        ]
        limits = (
            ("sm_clock_avg", None),
            ("app_sm_clock", None),
            ("temp_max", ctx.limit(t.GPU_TEMP_HIGH)),
            ("power_avg", None),
            ("power_limit", None),
        )
        ev += [evidence(view, name, bound) for name, bound in limits if view.get(name)]
        cause = "temperature" if thermal else "the power cap"
        clock_text = (
            f"SM clock {value(view, 'sm_clock_avg'):.0f} MHz vs base {f['base']:.0f} MHz"
            if f["slow"]
            else "clocks held down"
        )
        critical = (value(view, "temp_max") or 0) >= (value(view, "slowdown_temp") or 999)
        return Parts(
            Severity.CRITICAL if critical else Severity.WARNING,
            0.6 + (0.2 if f["active"] else 0) + (0.15 if f["slow"] else 0),
            f"{worst.name} is throttled by {cause}: {clock_text}"
            + (f", {value(view, 'temp_max'):.0f} C" if thermal and view.get("temp_max") else "")
            + "; latency and throughput follow the clock.",
            ev,
            (
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

    return one_finding("thermal_power_throttling", ctx.gpus.values(), judge, describe)
