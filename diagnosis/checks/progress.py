"""engine_stall: the engine answers /metrics (and /health) but makes no progress: requests are
running or waiting at the end of the window, and over its last minutes no token was prefilled or
generated (an NCCL hang, a deadlocked tensor-parallel worker, a KV load that never returns). A
liveness probe cannot see it (vllm-project/vllm#53130 asks for exactly this; Tanguille/cluster#4593:
/health 200 for 3 hours while nothing was served; gonka-ai/gonka#1421: 5-22 minutes)."""

from __future__ import annotations

from diagnosis.checks import Context, Hit, Parts, View, evidence, names, scoped_findings, value
from diagnosis.findings import Finding, Severity


def check(ctx: Context) -> list[Finding]:
    def judge(view: View) -> Hit | None:
        generated, prefilled = value(view, "generation_tps_recent"), value(view, "prompt_tps_recent")
        if generated is None or prefilled is None or generated > 0 or prefilled > 0:
            return None
        if (value(view, "aborted_recent") or 0) > 0:
            # it ended requests lately (a hung engine core processes no abort): after a mass
            # abort the engine went idle and its gauges still hold the last step's counts
            return None
        in_flight = (value(view, "running_last") or 0) + (value(view, "waiting_last") or 0)
        return Hit(view, in_flight) if in_flight >= 1 else None

    def describe(worst: Hit, hits: list[Hit]) -> Parts:
        view = worst.view
        running, waiting = value(view, "running_last") or 0, value(view, "waiting_last") or 0
        ev = [
            evidence(view, "generation_tps_recent", 0, above=False),
            evidence(view, "prompt_tps_recent", 0, above=False),
        ]
        ev += [evidence(view, name, 1) for name in ("running_last", "waiting_last") if (value(view, name) or 0) >= 1]
        return Parts(
            Severity.CRITICAL,
            f"{names(hits)} makes no progress: {running:.0f} running and {waiting:.0f} waiting, and not one "
            "token prefilled or generated over the last minutes, while it still answers its scrape (a hang its "
            "/health does not see).",
            ev,
            [
                "see where it hangs before restarting: py-spy dump --pid <EngineCore pid> (and each worker's); with "
                "tensor parallelism, NCCL_DEBUG=INFO and TORCH_NCCL_TRACE_BUFFER_SIZE=2000 show the collective",
                "restart the engine (drain the pod); alert on progress, not liveness: kvscope's VLLMEngineStalled",
                "a KV connector load that never returns (offload, NIXL) stalls admission: check its transfers",
            ],
        )

    return scoped_findings("engine_stall", ctx.engines.values(), judge, describe, ctx)
