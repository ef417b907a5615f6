"""thermal_power_throttling: clocks held below base by the power cap or temperature while the
GPU is busy (seed 004: the BMC cut 1.4 to 1.1 GHz, P99 jitter followed)."""

from __future__ import annotations

from diagnosis.checks import UTIL_READS, Context, Hit, Parts, View, evidence, labels_of, scoped_findings, value
from diagnosis.findings import Evidence, Finding, Severity
from kvscope import thresholds as t
from kvscope.catalog import CLOCK_EVENT_REASONS, THROTTLE_REASONS

ID = "thermal_power_throttling"
# the measures judge() reads (with Context.util's): what the end of the window is fetched for
READS = (
    "sm_clock_avg",
    "app_sm_clock",
    "max_sm_clock",
    "power_avg",
    "power_limit",
    "temp_max",
    "slowdown_temp",
    "throttle_active",
    "clock_reasons",
    "clock_events",
    "power_violation",
    "thermal_violation",
    *UTIL_READS,
)


def check(ctx: Context) -> list[Finding]:
    share_limit = ctx.limit(t.THROTTLE_SHARE)

    def judge(view: View) -> Hit | None:
        util = ctx.util(view)
        if util is not None and util < ctx.limit(t.GPU_UTIL_FLOOR):
            return None  # idle GPUs drop their clocks by design
        # missing is not idle: without a utilisation reading the clocks alone decide nothing (an
        # idle GPU's are low too), but the power cap, the temperature and the held reasons do
        active = _active_reasons(view, share_limit)
        model = ctx.models.lookup(labels_of(view).get("modelName"))
        clock = value(view, "sm_clock_avg")
        base = value(view, "app_sm_clock") or (model.base_sm_clock if model else None)
        top = value(view, "max_sm_clock") or (model.max_sm_clock if model else None)
        below_base = bool(clock is not None and base and clock < ctx.limit(t.CLOCK_BELOW_BASE) * base)
        below_max = bool(clock is not None and top and clock < ctx.limit(t.CLOCK_BELOW_MAX) * top)
        slow = below_base or below_max
        power = value(view, "power_avg")
        limit = value(view, "power_limit") or (model.tdp_w if model else None)
        at_power_cap = bool(power is not None and limit and power >= ctx.limit(t.POWER_AT_LIMIT) * limit)
        temp = value(view, "temp_max")
        slowdown = value(view, "slowdown_temp") or (model.slowdown_temp if model else None)
        hot_limit = (slowdown - ctx.limit(t.GPU_TEMP_MARGIN)) if slowdown else ctx.limit(t.GPU_TEMP_HIGH)
        hot = temp is not None and temp >= hot_limit
        # the power-cap reason alone is normal under full load; with the clock far down it is not
        held = {r for r in active if "power_cap" not in r} or (active if slow else set())
        if held or (slow and (at_power_cap or hot)):
            facts = {
                "active": held,
                "slow": slow,
                "hot": hot,
                "base": base if below_base or not top else top,
                "against": "base" if below_base or not top else "maximum",
                "hot_limit": hot_limit,
                "power_limit": limit,
                "at_power_cap": at_power_cap,
            }
            return Hit(view, (1 if held else 0) + (1 if slow else 0), facts)
        return None

    def describe(worst: Hit, hits: list[Hit]) -> Parts:
        view, f = worst.view, worst.facts
        thermal = f["hot"] or any("thermal" in (r or "") for r in f["active"])
        ev: list[Evidence] = [
            evidence({"throttle_active": [v]}, "throttle_active", share_limit)
            for v in view.get("throttle_active", [])
            if v.value >= share_limit
        ]
        ev += [evidence({"clock_events": [v]}, "clock_events", 0) for v in view.get("clock_events", []) if v.value > 0]
        share = ctx.limit(t.CLOCK_BELOW_MAX if f["against"] == "maximum" else t.CLOCK_BELOW_BASE)
        limits = (  # (measure, threshold, the finding holds above it)
            ("sm_clock_avg", round(share * f["base"]) if f["base"] else None, False),
            ("app_sm_clock", None, True),
            ("temp_max", f["hot_limit"], True),
            ("power_avg", round(ctx.limit(t.POWER_AT_LIMIT) * f["power_limit"], 1) if f["power_limit"] else None, True),
            ("power_limit", None, True),
            ("clock_reasons", None, True),
        )
        ev += [evidence(view, name, bound, above) for name, bound, above in limits if view.get(name)]
        cause = "temperature" if thermal else "the power cap"
        if not thermal and f["at_power_cap"] and view.get("power_avg"):
            cause += f" ({value(view, 'power_avg'):.1f} W of {f['power_limit']:.0f} W)"
        clock_text = (
            f"SM clock {value(view, 'sm_clock_avg'):.0f} MHz vs {f['against']} {f['base']:.0f} MHz"
            if f["slow"]
            else "clocks held down"
        )
        critical = (value(view, "temp_max") or 0) >= f["hot_limit"] + ctx.limit(t.GPU_TEMP_MARGIN)
        return Parts(
            Severity.CRITICAL if critical else Severity.WARNING,
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

    return scoped_findings(ID, ctx.gpus.values(), judge, describe, ctx)


def _active_reasons(view: View, share_limit: float) -> set[str]:
    """Power or thermal clock-event reasons active in the window, from whichever the data has:
    kvscope's per-reason gauge, dcgm-exporter's bitmask or its event counts, violation counters."""
    active = {v.labels.get("reason", "") for v in view.get("throttle_active", []) if v.value >= share_limit}
    mask = value(view, "clock_reasons")
    if mask is not None and mask >= 0:
        active |= {name for bit, name in CLOCK_EVENT_REASONS.items() if int(mask) & bit and name in THROTTLE_REASONS}
    for v in view.get("clock_events", []):
        event = v.labels.get("clock_event", "")
        if v.value > 0 and any(word in event for word in ("power", "thermal", "slowdown", "brake")):
            active.add(event)
    for name, reason in (("power_violation", "sw_power_cap"), ("thermal_violation", "sw_thermal_slowdown")):
        if (value(view, name) or 0) / 1e9 >= share_limit:  # ns throttled per second
            active.add(reason)
    return active
