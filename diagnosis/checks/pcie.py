"""pcie_bottleneck: PCIe transfers near the link's capacity, or the link degraded (generation
or width below its maximum, replays). Seed 002: GPUs 95 % busy, tokens flat, PCIe saturated."""

from __future__ import annotations

from diagnosis.checks import Context, evidence, labels_of, value
from diagnosis.findings import Evidence, Finding, Severity, affected, describe
from kvscope import thresholds as t
from kvscope.gpu_models import lookup, pcie_capacity


def check(ctx: Context) -> Finding | None:
    hits = []
    for view in ctx.gpus.values():
        gen, width = value(view, "pcie_gen"), value(view, "pcie_width")
        max_gen, max_width = value(view, "pcie_max_gen"), value(view, "pcie_max_width")
        model = lookup(labels_of(view).get("modelName"))
        capacity = (
            value(view, "pcie_capacity")
            or pcie_capacity(gen, width)
            or (pcie_capacity(model.pcie_gen, model.pcie_width) if model else None)
        )
        traffic = max(value(view, "pcie_tx_avg") or 0, value(view, "pcie_rx_avg") or 0)
        share = traffic / capacity if capacity else 0.0
        degraded = bool(gen and max_gen and gen < max_gen) or bool(width and max_width and width < max_width)
        replays = (value(view, "pcie_replay_rate") or 0) > t.PCIE_REPLAY_RATE.value
        if share >= t.PCIE_SATURATION.value or degraded or replays:
            hits.append((view, share, degraded, replays, capacity))
    if not hits:
        return None
    view, share, degraded, replays, capacity = max(hits, key=lambda h: (h[2], h[1]))
    ev = []
    if capacity:
        busiest = (
            "pcie_tx_avg" if (value(view, "pcie_tx_avg") or 0) >= (value(view, "pcie_rx_avg") or 0) else "pcie_rx_avg"
        )
        if view.get(busiest):
            ev.append(evidence(view, busiest, round(t.PCIE_SATURATION.value * capacity)))
    if degraded:
        ev += [evidence(view, n) for n in ("pcie_gen", "pcie_max_gen", "pcie_width", "pcie_max_width") if view.get(n)]
    if replays:
        ev.append(evidence(view, "pcie_replay_rate", t.PCIE_REPLAY_RATE))
    if not ev:
        ev.append(Evidence(query="pcie", value=share, threshold=t.PCIE_SATURATION.value, labels=labels_of(view)))
    if degraded:
        state = (
            f"link degraded to Gen{value(view, 'pcie_gen'):.0f} x{value(view, 'pcie_width'):.0f} "
            f"(capable of Gen{value(view, 'pcie_max_gen'):.0f} x{value(view, 'pcie_max_width'):.0f})"
        )
    else:
        state = f"PCIe at {share:.0%} of the link's capacity"
    return Finding(
        id="pcie_bottleneck",
        severity=Severity.CRITICAL if degraded and replays else Severity.WARNING,
        confidence=0.85 if degraded else 0.7,
        summary=f"{describe(labels_of(view))}: {state}" + (" with replays" if replays else "") + ".",
        affected=[affected(labels_of(v)) for v, *_ in hits],
        evidence=ev,
        remediation=(
            [
                "compare negotiated and capable link: lspci -vv -s <bus id> | grep -E 'LnkCap|LnkSta'; reseat or "
                "replace the riser/card, check BIOS PCIe settings",
                "drain the GPU until the link is back at full width",
            ]
            if degraded
            else [
                "find what moves data over PCIe: KV offload or swapping to CPU memory, host-side pre/post-processing, "
                "tensor parallelism across non-NVLink GPUs (nvidia-smi topo -m)",
                "keep KV on the GPU: --kv-cache-dtype fp8, a larger pool, or fewer concurrent long requests",
                "keep tensor-parallel groups on NVLink-connected GPUs of one NUMA node (seed 004 section 4.2)",
            ]
        ),
    )
