"""Start vLLM's OpenAI server on the demo model, send a few requests, print its live metrics.

`python -m drill.quickstart` — the smoke test of the foundation: the generated model loads,
the official `openai` client gets answers, and `/metrics` exposes vLLM's series.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

import httpx
from openai import OpenAI
from rich.console import Console
from rich.table import Table

from drill.launcher import ServerFailedError, running, vllm_openai_server
from kvscope import catalog
from serving.demo_model import SERVED_NAME, ensure_demo_model, synthetic_text

# The series worth showing after a few requests: the KV-cache-first view of the engine.
SHOWN = (
    catalog.VLLM_KV_CACHE_USAGE,
    catalog.VLLM_REQUESTS_RUNNING,
    catalog.VLLM_REQUESTS_WAITING,
    catalog.VLLM_NUM_PREEMPTIONS,
    catalog.VLLM_PROMPT_TOKENS,
    catalog.VLLM_GENERATION_TOKENS,
    catalog.VLLM_REQUEST_SUCCESS,
    catalog.VLLM_PREFIX_CACHE_QUERIES,
    catalog.VLLM_PREFIX_CACHE_HITS,
    catalog.VLLM_TTFT,
    catalog.VLLM_CACHE_CONFIG_INFO,
)


def send_requests(base_url: str, console: Console) -> None:
    """One completion, one chat, one streamed completion, through the official client."""
    client = OpenAI(base_url=base_url + "/v1", api_key="unused", timeout=60)
    rng = random.Random(7)
    completion = client.completions.create(model=SERVED_NAME, prompt=synthetic_text(rng, 40), max_tokens=24)
    prompt_tokens = completion.usage.prompt_tokens if completion.usage else "?"
    console.print(f"[bold]completion[/] ({prompt_tokens} prompt tokens): {completion.choices[0].text!r}")
    chat = client.chat.completions.create(
        model=SERVED_NAME,
        messages=[{"role": "user", "content": synthetic_text(rng, 30)}],
        max_tokens=16,
    )
    console.print(f"[bold]chat[/]: {chat.choices[0].message.content!r}")
    pieces = [
        chunk.choices[0].text
        for chunk in client.completions.create(
            model=SERVED_NAME, prompt=synthetic_text(rng, 200), max_tokens=32, stream=True
        )
        if chunk.choices
    ]
    console.print(f"[bold]stream[/]: {len(pieces)} chunks: {''.join(pieces)!r}")


def metric_lines(page: str) -> list[str]:
    """The lines of a /metrics page that belong to the series in SHOWN (histograms: _count)."""
    wanted = []
    for signal in SHOWN:
        wanted.append(signal.name + "_count" if signal.kind is catalog.Kind.HISTOGRAM else signal.name)
    return [
        line
        for line in page.splitlines()
        if not line.startswith("#") and any(line.startswith((w + "{", w + " ")) for w in wanted)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--log-dir", type=Path, default=None, help="where the server log goes")
    args = parser.parse_args(argv)
    console = Console()
    model = ensure_demo_model()
    console.print(f"demo model: {model}")
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="kvscope-demo-"))
    server = vllm_openai_server(model, log_dir / "vllm.log", served_name=SERVED_NAME)
    console.print(f"starting vLLM's OpenAI server at {server.base_url} (log: {server.log_path})")
    try:
        with running(server):
            send_requests(server.base_url, console)
            page = httpx.get(server.base_url + "/metrics", timeout=10).text
    except ServerFailedError as exc:
        console.print(f"[red]{exc}[/]")
        return 1
    lines = metric_lines(page)
    vllm_lines = sum(1 for line in page.splitlines() if line.startswith(catalog.VLLM_NAMESPACE))
    table = Table(title=f"live vLLM metrics ({vllm_lines} vLLM lines on /metrics)")
    table.add_column("series", overflow="fold")
    table.add_column("value", justify="right")
    for line in lines:
        series, _, value = line.rpartition(" ")
        table.add_row(series, value)
    console.print(table)
    return 0 if lines else 1


if __name__ == "__main__":
    sys.exit(main())
