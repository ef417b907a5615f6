"""Shared by the benchmarks: servers started like users start them, vLLM's own load generator."""

from __future__ import annotations

import contextlib
import json
import random
import statistics
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from drill.launcher import ServerProcess, kvscope_server, running, vllm_openai_server
from drill.results import percentile as drill_percentile
from drill.traffic import WORDS_PER_TOKEN, Mix
from serving.demo_model import SERVED_NAME, ensure_demo_model, synthetic_text

__all__ = ["Mix", "dataset", "percentile"]


@contextlib.contextmanager
def server(kind: str, workdir: Path, profile: str = "default", extra: Sequence[str] = ()) -> Iterator[ServerProcess]:
    """`vllm` (vLLM's own OpenAI server) or `kvscope` (kvscope serve), ready to take load."""
    model = ensure_demo_model()
    if kind == "vllm":
        proc = vllm_openai_server(model, workdir / "vllm.log", served_name=SERVED_NAME, extra_args=extra)
        ready = "/health"
    else:
        proc = kvscope_server(workdir / f"kvscope-{profile}.log", profile=profile, extra_args=extra)
        ready = "/ready"
    with running(proc, ready_path=ready, timeout=300) as ready_server:
        yield ready_server


def vllm_bench(base_url: str, args: Sequence[str]) -> dict[str, Any]:
    """Run `vllm bench serve` (vllm.benchmarks.serve) against base_url; its result dict."""
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    parsed = parser.parse_args(
        [
            "--backend",
            "vllm",
            "--base-url",
            base_url,
            "--endpoint",
            "/v1/completions",
            "--model",
            SERVED_NAME,
            "--tokenizer",
            str(ensure_demo_model()),
            "--percentile-metrics",
            "ttft,tpot,itl,e2el",
            "--metric-percentiles",
            "50,90,99",
            "--save-detailed",
            "--disable-tqdm",
            "--ignore-eos",
            "--temperature",
            "0",
            *args,
        ]
    )
    return main(parsed)


def dataset(mix: Mix, count: int, seed: int, folder: Path) -> Path:
    """A JSONL file in `folder` of `count` fresh prompts of the seeds' mix (drill/traffic.py's, the
    one definition), for `vllm bench serve` (no prefix-cache reuse across runs)."""
    rng = random.Random(seed)
    sizes = rng.choices((mix.short_tokens, mix.medium_tokens, mix.long_tokens), mix.shares, k=count)
    path = folder / f"mix-{seed}.jsonl"
    with path.open("w") as f:
        for tokens in sizes:
            prompt = synthetic_text(rng, int(tokens * WORDS_PER_TOKEN))
            f.write(json.dumps({"prompt": prompt, "output_tokens": mix.output_tokens}) + "\n")
    return path


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), as numpy does (drill/results.py's); NaN when empty."""
    found = drill_percentile(values, q)
    return float("nan") if found is None else found


def by_prompt_length(result: dict[str, Any], below: int) -> list[float]:
    """TTFTs (seconds) of the requests whose prompt was shorter than `below` tokens."""
    return [t for t, n in zip(result["ttfts"], result["input_lens"], strict=True) if n < below and t > 0]


def summary(values: Sequence[float]) -> str:
    return f"p50 {statistics.median(values) * 1000:.1f} ms, p99 {percentile(values, 99) * 1000:.1f} ms"


def comma_list(text: str) -> list[str]:
    """An argparse type: `a, b,c` -> ["a", "b", "c"]."""
    return [part.strip() for part in text.split(",")]
