"""pcie_bottleneck: PCIe transfers near the link's capacity, or the link degraded (generation
or width below its maximum, replays). Seed 002: GPUs 95 % busy, tokens flat, PCIe saturated.

A GPU lowers its link's generation, and may lower its width, whenever it is idle, and trains it
back up for work (nvidia-smi: the current link "may be reduced when the GPU is not in use"): the
link is degraded only when the best it reached over the window is below its maximum while the GPU
worked (at least gpu_util_floor on average). An idle GPU's link says nothing of the link, and
the capacity transfers are measured against is the link's at its best over the window, not an idle
moment's (tests/scenarios/reality4.py)."""

from __future__ import annotations

from diagnosis.checks import UTIL_READS, Context, Hit, Parts, View, evidence, labels_of, scoped_findings, value
from diagnosis.findings import Evidence, Finding, Severity
from kvscope import thresholds as t
from kvscope.gpu_models import pcie_capacity

ID = "pcie_bottleneck"
# the measures judge() reads: what the end of the window is fetched for
READS = (
    "pcie_gen",
    "pcie_width",
    "pcie_max_gen",
    "pcie_max_width",
    "pcie_capacity",
    "pcie_tx_avg",
    "pcie_rx_avg",
    "pcie_replay_rate",
    *UTIL_READS,
)


def check(ctx: Context) -> list[Finding]:
    saturation = ctx.limit(t.PCIE_SATURATION)

    def judge(view: View) -> Hit | None:
        gen, width = value(view, "pcie_gen"), value(view, "pcie_width")
        max_gen, max_width = value(view, "pcie_max_gen"), value(view, "pcie_max_width")
        model = ctx.models.lookup(labels_of(view).get("modelName"))
        capacity = (
            value(view, "pcie_capacity")
            or pcie_capacity(gen, width)
            or (pcie_capacity(model.pcie_gen, model.pcie_width) if model else None)
        )
        traffic = max(value(view, "pcie_tx_avg") or 0, value(view, "pcie_rx_avg") or 0)
        if capacity:  # nominal (kvscope's gauge too): transfers reach a share of it
            capacity *= ctx.limit(t.PCIE_ACHIEVABLE_SHARE)
        share = traffic / capacity if capacity else 0.0
        util = ctx.util(view)
        worked = util is not None and util >= ctx.limit(t.GPU_UTIL_FLOOR)
        below = bool(gen and max_gen and gen < max_gen) or bool(width and max_width and width < max_width)
        degraded = below and worked
        replays = (value(view, "pcie_replay_rate") or 0) > ctx.limit(t.PCIE_REPLAY_RATE)
        if share >= saturation or degraded or replays:
            facts = {"share": share, "degraded": degraded, "replays": replays, "capacity": capacity}
            return Hit(view, (2 if degraded else 0) + share, facts)
        return None

    def describe(worst: Hit, hits: list[Hit]) -> Parts:
        view, f = worst.view, worst.facts
        ev: list[Evidence] = []
        if f["capacity"]:
            tx, rx = value(view, "pcie_tx_avg") or 0, value(view, "pcie_rx_avg") or 0
            busiest = "pcie_tx_avg" if tx >= rx else "pcie_rx_avg"
            if view.get(busiest):
                ev.append(evidence(view, busiest, round(saturation * f["capacity"])))
        if f["degraded"]:
            for now, top in (("pcie_gen", "pcie_max_gen"), ("pcie_width", "pcie_max_width")):
                best, most = value(view, now), value(view, top)
                if best and most and best < most:  # below its maximum: past the line by the lanes lost
                    ev += [evidence(view, now, most, above=False), evidence(view, top)]
            for use in ("gpu_util_avg", "gr_active_avg"):  # it worked: the link was asked for its best
                if view.get(use):
                    floor = ctx.limit(t.GPU_UTIL_FLOOR)
                    ev.append(evidence(view, use, floor if use == "gpu_util_avg" else floor / 100))
                    break
        if f["replays"]:
            ev.append(evidence(view, "pcie_replay_rate", ctx.limit(t.PCIE_REPLAY_RATE)))
        if not ev:
            ev.append(Evidence(query="pcie", value=f["share"], threshold=saturation, labels=worst.labels))
        if f["degraded"]:
            state = (
                f"link at best Gen{value(view, 'pcie_gen'):.0f} x{value(view, 'pcie_width'):.0f} while "
                f"{ctx.util(view):.0f} % busy (capable of Gen{value(view, 'pcie_max_gen'):.0f} "
                f"x{value(view, 'pcie_max_width'):.0f})"
            )
        else:
            state = f"PCIe at {f['share']:.0%} of what the link achieves ({f['capacity'] / 1e9:.1f} GB/s per direction)"
        return Parts(
            Severity.CRITICAL if f["degraded"] and f["replays"] else Severity.WARNING,
            f"{worst.name}: {state}" + (" with replays" if f["replays"] else "") + ".",
            ev,
            (
                [
                    "compare negotiated and capable link: lspci -vv -s <bus id> | grep -E 'LnkCap|LnkSta'; reseat "
                    "or replace the riser/card, check BIOS PCIe settings",
                    "drain the GPU until the link is back at full width",
                ]
                if f["degraded"]
                else [
                    "find what moves data over PCIe: KV offload or swapping to CPU memory, host-side pre/post-"
                    "processing, tensor parallelism across non-NVLink GPUs (nvidia-smi topo -m)",
                    "keep KV on the GPU: --kv-cache-dtype fp8, a larger pool, or fewer concurrent long requests",
                    "keep tensor-parallel groups on NVLink-connected GPUs of one NUMA node (seed 004 section 4.2)",
                ]
            ),
        )

    return scoped_findings(ID, ctx.gpus.values(), judge, describe, ctx)
