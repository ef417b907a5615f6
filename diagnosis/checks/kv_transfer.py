"""kv_transfer_failure: KV-cache transfers between engines or tiers fail (NIXL in disaggregated
prefill/decode, the offloading connector's allocations), so requests recompute their prefill,
wait on a load that never returns, or time out (vllm-project/vllm#55181: a failed NIXL load left
requests pending until the client gave up while the engine looked healthy; llm-d/llm-d#191)."""

from __future__ import annotations

from diagnosis.checks import Context, Hit, Parts, View, evidence, names, scoped_findings, value
from diagnosis.findings import Finding, Severity
from kvscope import thresholds as t


def check(ctx: Context) -> list[Finding]:
    limit = ctx.limit(t.KV_TRANSFER_FAILURE_RATE)

    def judge(view: View) -> Hit | None:
        failures = value(view, "kv_transfer_failures")
        return Hit(view, failures) if failures is not None and failures > limit else None

    def describe(worst: Hit, hits: list[Hit]) -> Parts:
        view = worst.view
        ev = [evidence(view, "kv_transfer_failures", limit)]
        slow = ""
        if view.get("kv_transfer_p99"):
            ev.append(evidence(view, "kv_transfer_p99"))
            slow = f", the p99 transfer taking {value(view, 'kv_transfer_p99'):.2f} s"
        waiting = (value(view, "queue_p99") or 0) >= ctx.limit(t.QUEUE_TIME_P99)
        return Parts(
            Severity.CRITICAL if waiting else Severity.WARNING,
            f"KV transfers fail on {names(hits)}: {worst.score:.2f} failed per second{slow}; those requests "
            "recompute their prefill or wait for a load that does not come"
            + (" (its queue waits for them)." if waiting else "."),
            ev,
            [
                "check the transport between prefill and decode: NIXL/UCX logs (UCX_LOG_LEVEL=info), the RDMA "
                "links (ibstat, ibv_devinfo), NIXL_ERR_* in the engine's log",
                "set kv_load_failure_policy: recompute in --kv-transfer-config so a failed load falls back to "
                "local prefill instead of hanging (vllm-project/vllm#55181)",
                "offload allocations failing: the CPU/disk tier is full; raise its size or lower the offloaded share",
            ],
        )

    return scoped_findings("kv_transfer_failure", ctx.engines.values(), judge, describe, ctx)
