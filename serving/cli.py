"""serving's sub-app: `kvscope serve`, `kvscope plan`, `kvscope demo-model`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from kvscope import exitcodes
from kvscope.cli_support import ConfigOption, choice, fail, load_config
from serving.gateway_config import GatewayConfig

CONFIG_SECTION = ("gateway", GatewayConfig)  # its part of kvscope.yaml, for `kvscope config show`
app = typer.Typer()
_PASSTHROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


@app.command(context_settings=_PASSTHROUGH)
def serve(
    ctx: typer.Context,
    model: Annotated[str | None, typer.Option(help="Model folder or name (default: the generated demo model).")] = None,
    served_model_name: Annotated[str | None, typer.Option(help="Name clients ask for.")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    profile: Annotated[
        str,
        typer.Option(help="default: vLLM's defaults; tuned: the seeds' fixes for this hardware."),
    ] = "default",
    config: ConfigOption = None,
    draft_model: Annotated[str | None, typer.Option(help="Draft model for speculative decoding (GPU only).")] = None,
    drain_timeout: Annotated[float, typer.Option(help="Seconds SIGTERM waits for in-flight requests.")] = 30.0,
) -> None:
    """Run the gateway + vLLM engine with a tuned profile (default | tuned).

    The gateway (API keys, tiers, limits, quotas, QoS) is the `gateway:` section of --config.
    Any other --flag is passed to vLLM as an engine flag and overrides the profile.
    """
    from serving.server import ServeOptions, run

    load_config("serve", config)  # the whole file is valid before the engine loads
    options = ServeOptions(
        model=model,
        served_model_name=served_model_name,
        host=host,
        port=port,
        profile=profile,
        config=config,
        draft_model=draft_model,
        drain_timeout=drain_timeout,
        engine_flags=tuple(ctx.args),
    )
    raise typer.Exit(run(options))


@app.command()
def plan(
    model: Annotated[str, typer.Option(help="A Hugging Face config.json, or a model folder with one.")],
    gpus: Annotated[int, typer.Option(help="GPUs per engine (tensor parallel).")],
    gpu_memory: Annotated[float, typer.Option(help="Memory per GPU in GB (e.g. 80, 141).")],
    context: Annotated[int, typer.Option(help="Longest request (prompt + output) in tokens.")],
    kv_dtype: Annotated[str, typer.Option(help="fp16 | bf16 | fp8")] = "fp16",
    gpu_memory_utilization: Annotated[float, typer.Option(help="vLLM's share of each GPU.")] = 0.9,
    typical_tokens: Annotated[
        int | None, typer.Option(help="A typical request's tokens (default: context / 4).")
    ] = None,
    output_format: Annotated[str, typer.Option("--format", help="text | json")] = "text",
    config: ConfigOption = None,
) -> None:
    """KV-cache capacity plan for a model and GPUs."""
    from kvscope.model_shape import ShapeError, load_shape
    from serving.planner import PlanError
    from serving.planner import plan as make_plan

    load_config("plan", config)
    choice("plan", "--format", output_format, ("text", "json"))
    try:
        shape = load_shape(model)
        result = make_plan(
            shape,
            gpus=gpus,
            gpu_memory_gib=gpu_memory,
            context=context,
            kv_dtype=kv_dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            typical_tokens=typical_tokens,
        )
    except (PlanError, ShapeError) as exc:
        fail("plan", str(exc))
    if output_format == "json":
        typer.echo(
            json.dumps(
                {"model": model, "gpus": gpus, "gpu_memory_gb": gpu_memory, "context": context, **result.as_dict()},
                indent=2,
            )
        )
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"KV-cache plan: {model} on {gpus} x {gpu_memory:g} GB, context {context:,}")
    table.add_column("")
    table.add_column("value", justify="right")
    rows = [
        ("KV bytes per token", f"{result.kv_bytes_per_token:,} ({kv_dtype})"),
        ("  if GQA were ignored (seed 000's formula)", f"{result.kv_bytes_per_token_ignoring_gqa:,}"),
        ("weights", f"{result.weights_gib:,.1f} GiB"),
        ("KV pool", f"{result.kv_pool_gib:,.1f} GiB = {result.blocks:,} blocks of {result.block_size} tokens"),
        ("tokens in the pool", f"{result.pool_tokens:,}"),
        (f"sequences at full context ({context:,})", f"{result.sequences_at_full_context:,}"),
        ("sequences at a typical length", f"{result.sequences_at_typical_length:,}"),
        ("--block-size", str(result.block_size)),
        ("--max-num-seqs", str(result.max_num_seqs)),
        ("--max-num-batched-tokens", str(result.max_num_batched_tokens)),
        ("--long-prefill-token-threshold", str(result.long_prefill_token_threshold)),
    ]
    for name, v in rows:
        table.add_row(name, v)
    console = Console()
    console.print(table)
    for note in result.notes:
        console.print(f"note: {note}")


@app.command("demo-model")
def demo_model(
    cache_dir: Annotated[
        Path | None,
        typer.Option(help="Cache folder (default: $KVSCOPE_CACHE_DIR or ~/.cache/kvscope)."),
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Generate the offline demo model (tiny Llama + BPE tokenizer) and print its folder."""
    from serving.demo_model import ensure_demo_model

    load_config("demo-model", config)
    typer.echo(ensure_demo_model(cache_dir))
    raise typer.Exit(exitcodes.OK)
