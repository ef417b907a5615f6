"""A vLLM 0.32 /metrics page of one data-parallel deployment, written by vLLM's own code.

    .venv/bin/python -m bench.vllm_dp_page --engines 8 --out page.prom

`vllm serve --data-parallel-size N` (one API server) serves every engine's series on one
page, told apart by the `engine` label: vLLM's PrometheusStatLogger with engine_indexes
0..N-1, as StatLoggerManager builds it. Here it is built from a real VllmConfig (the demo
model, every metric family on: --kv-cache-metrics, --enable-mfu-metrics, ngram spec decode,
LoRA) and fed recorded-like stats (seeded): scheduler state, prefix-cache and spec-decode
counts, MFU from vllm/v1/metrics/perf.py's ModelMetrics, KV block residency events, LoRA
adapters, finished requests. Run it as its own process: vLLM registers on the global
prometheus_client registry, and nothing of it must leak into the process that measures.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path


def build_page(engines: int, steps: int = 300, seed: int = 0) -> str:
    import prometheus_client
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine import FinishReason
    from vllm.v1.metrics.loggers import PrometheusStatLogger
    from vllm.v1.metrics.perf import ExecutionContext, ModelMetrics, PerfStats
    from vllm.v1.metrics.stats import (
        FinishedRequestStats,
        IterationStats,
        KVCacheEvictionEvent,
        PrefixCacheStats,
        SchedulerStats,
    )
    from vllm.v1.spec_decode.metrics import SpecDecodingStats

    from serving.demo_model import SERVED_NAME, ensure_demo_model

    spec_tokens = 4
    config = EngineArgs(
        model=str(ensure_demo_model()),
        served_model_name=[SERVED_NAME],
        enforce_eager=True,
        kv_cache_metrics=True,
        enable_mfu_metrics=True,
        enable_lora=True,
        max_loras=4,
        max_lora_rank=8,
        speculative_config={"method": "ngram", "num_speculative_tokens": spec_tokens, "prompt_lookup_max": 4},
    ).create_engine_config()
    logger = PrometheusStatLogger(config, engine_indexes=list(range(engines)))
    logger.log_engine_initialized()
    mfu = ModelMetrics(config)
    rng = random.Random(seed)
    adapters = ["sql-lora", "chat-lora", "code-lora", "summ-lora"]
    for step in range(steps):
        for engine in range(engines):
            running = rng.randint(1, 48)
            spec = SpecDecodingStats.new(spec_tokens)
            for _ in range(running):
                spec.observe_draft(spec_tokens, rng.randint(0, spec_tokens))
            ctx = ExecutionContext()
            if step % 4 == 0:
                ctx.add(rng.randint(256, 2048), rng.randint(2048, 8192), is_prefill=True)
            for _ in range(running):
                ctx.add(1, rng.randint(256, 8192), is_prefill=False)
            scheduler = SchedulerStats(
                num_running_reqs=running,
                num_waiting_reqs=rng.randint(0, 20),
                num_skipped_waiting_reqs=rng.randint(0, 3),
                kv_cache_usage=rng.uniform(0.2, 0.95),
                prefix_cache_stats=PrefixCacheStats(queries=rng.randint(0, 4096), hits=rng.randint(0, 2048)),
                spec_decoding_stats=spec,
                perf_stats=PerfStats(mfu.get_num_flops(ctx), mfu.get_read_bytes(ctx), mfu.get_write_bytes(ctx)),
                kv_cache_eviction_events=[
                    KVCacheEvictionEvent(rng.expovariate(1 / 30), rng.expovariate(1 / 5), (rng.uniform(0, 10),))
                    for _ in range(rng.randint(0, 3))
                ],
                running_lora_adapters={a: 1 for a in rng.sample(adapters, rng.randint(0, 2))},
                waiting_lora_adapters={a: 1 for a in rng.sample(adapters, rng.randint(0, 1))},
            )
            iteration = IterationStats()
            iteration.num_generation_tokens = running
            iteration.prompt_token_stats.total = iteration.prompt_token_stats.computed = ctx.prefill_num_tokens
            iteration.time_to_first_tokens_iter = [rng.lognormvariate(-1.5, 1.0) for _ in range(step % 4 == 0)]
            iteration.inter_token_latencies_iter = [rng.lognormvariate(-3.5, 0.5) for _ in range(running)]
            if step % 3 == 0:
                iteration.max_num_generation_tokens_iter = [rng.choice([256, 512, 1024])]
                iteration.n_params_iter = [1]
                prompt = rng.randint(64, 8192)
                iteration.finished_requests = [
                    FinishedRequestStats(
                        finish_reason=rng.choice([FinishReason.STOP, FinishReason.STOP, FinishReason.LENGTH]),
                        e2e_latency=rng.lognormvariate(1.0, 0.7),
                        num_prompt_tokens=prompt,
                        num_generation_tokens=rng.randint(16, 1024),
                        max_tokens_param=1024,
                        queued_time=rng.expovariate(2.0),
                        prefill_time=rng.lognormvariate(-1.5, 0.8),
                        inference_time=rng.lognormvariate(0.8, 0.6),
                        decode_time=rng.lognormvariate(0.7, 0.6),
                        mean_time_per_output_token=rng.lognormvariate(-3.5, 0.4),
                        num_cached_tokens=rng.randint(0, prompt),
                    )
                ]
            logger.record(scheduler, iteration, None, engine)
    return prometheus_client.generate_latest().decode()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", type=int, default=8)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    page = build_page(args.engines, args.steps)
    args.out.write_text(page)
    lines = sum(1 for line in page.splitlines() if line and not line.startswith("#"))
    print(f"{args.engines} engines: {lines} series, {len(page)} bytes, {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
