"""Each check on hand-built measurements: fires on its condition, stays silent just below."""

from diagnosis.checks import (
    Context,
    decode,
    gateway,
    hardware,
    kv_cache,
    memory,
    pcie,
    prefill,
    prefix,
    saturation,
    throttling,
    underutilized,
)
from diagnosis.findings import Severity
from diagnosis.measures import Measurements, Value
from diagnosis.verdict import diagnose
from kvscope import config, exitcodes
from kvscope import thresholds as t

ENGINE = {"instance": "10.0.0.1:8000", "pod": "vllm-0", "namespace": "prod", "model_name": "m"}
GPU = {
    "instance": "node-0:9400",
    "Hostname": "node-0",
    "gpu": "0",
    "UUID": "GPU-1",
    "modelName": "NVIDIA H100 80GB HBM3",
}
BASE_ENGINE = dict(
    kv_usage_max=0.5,
    kv_usage_avg=0.4,
    waiting_max=1,
    waiting_slope=0.0,
    running_max=20,
    preemption_rate=0.0,
    queue_p99=0.2,
    ttft_p50=0.1,
    ttft_p99=0.5,
    itl_p50=0.02,
    itl_p99=0.05,
    prompt_p50=800,
    prompt_p99=3000,
    request_rate=5,
    generation_tps=1000,
    generation_tps_recent=1000,
)
BASE_GPU = dict(
    gpu_util_avg=65,
    fb_used_max=75000,
    fb_free_min=6047,
    fb_reserved=512,
    sm_clock_avg=1980,
    temp_max=62,
    power_avg=480,
    pcie_rx_avg=2e9,
    pcie_tx_avg=1e9,
)


def measurements(engine=None, gpu=None, config=None, config_instance=GPU["instance"]) -> Measurements:
    m = Measurements()
    for name, v in {**BASE_ENGINE, **(engine or {})}.items():
        if v is not None:
            m.values[name] = [Value(float(v), dict(ENGINE), f"q:{name}")]
    for name, v in {**BASE_GPU, **(gpu or {})}.items():
        if v is not None:
            m.values[name] = [Value(float(v), dict(GPU), f"q:{name}")]
    if config is not None:
        # kvscope export re-exposes its node's engines: their series share the GPUs' instance
        labels = {**ENGINE, "instance": config_instance, "gpu_memory_utilization": str(config)}
        m.values["cache_config"] = [Value(1.0, labels, "q")]
    return m


def one(check, context):
    """The check's finding on the one scope these measurements have, or None."""
    found = check(context)
    assert len(found) <= 1, found
    return found[0] if found else None


def fires(check, limits=None, **kw) -> bool:
    context = Context.of(measurements(**kw)) if limits is None else Context.of(measurements(**kw), limits)
    return bool(check(context))


def test_the_baseline_is_healthy():
    result = diagnose(measurements(config=0.92), 0, 900, "test")
    assert result.bottleneck == "healthy" and result.exit_code == exitcodes.OK


def test_kv_exhaustion_needs_preemptions_or_a_full_pool_that_swaps():
    assert fires(kv_cache.check, engine={"kv_usage_max": 0.95, "preemption_rate": 0.5})
    assert not fires(kv_cache.check, engine={"kv_usage_max": 0.95, "preemption_rate": 0.0})
    assert not fires(kv_cache.check, engine={"kv_usage_max": 0.95, "preemption_rate": 0.04})
    assert fires(kv_cache.check, engine={"kv_usage_max": 0.92, "swapped_max": 3})  # V0 swapped instead
    assert not fires(kv_cache.check, engine={"kv_usage_max": 0.80, "swapped_max": 3})


def test_preemptions_prove_a_full_pool_the_sampled_gauge_missed():
    # vLLM preempts only when no KV block is free; on a busy engine usage swings within a second,
    # so a 1 s scrape can peak at 82 % while the engine preempts (seen in the kv-avalanche drill)
    # (there the queue pays for it: queue time past its line)
    paid = {"preemption_rate": 0.5, "queue_p99": 2.0}
    missed = one(kv_cache.check, Context.of(measurements(engine={"kv_usage_max": 0.82, **paid})))
    seen = one(kv_cache.check, Context.of(measurements(engine={"kv_usage_max": 0.97, **paid})))
    assert missed is not None and seen is not None
    assert "sampled usage peaked at 82%" in missed.summary and "usage 97%" in seen.summary
    assert missed.confidence < seen.confidence


def test_thin_preemptions_nobody_waits_for_are_how_a_busy_pool_works():
    # inference-sim/inference-sim#963: each preempted request preempted once, no queue, TTFT fine
    thin = {"kv_usage_max": 0.88, "preemption_rate": 0.08, "queue_p99": 0.6, "ttft_p99": 0.6, "waiting_slope": 0.0}
    assert one(kv_cache.check, Context.of(measurements(engine=thin))) is None
    growing = {**thin, "waiting_slope": 0.5}
    assert one(kv_cache.check, Context.of(measurements(engine=growing))) is not None


def test_a_full_pool_that_requests_queue_for_is_exhaustion_without_evictions():
    # vLLM V1 admits a waiting request only when its blocks are free and preempts only running ones
    # (vllm-project/vllm#31731): the kv-avalanche drill's tuned run, 97 %, 12 waiting, 4 s, 0.02/s
    queued = {"kv_usage_max": 0.97, "waiting_max": 12, "queue_p99": 4.0, "preemption_rate": 0.02}
    finding = one(kv_cache.check, Context.of(measurements(engine=queued)))
    assert finding is not None and finding.severity == Severity.WARNING
    assert "up to 12 waiting with p99 queue time 4.00 s" in finding.summary and "nothing is evicted" in finding.summary
    assert {e.measure for e in finding.evidence} >= {"kv_usage_max", "waiting_max", "queue_p99"}
    assert fires(kv_cache.check, engine={**queued, "queue_p99": 0.8, "waiting_slope": 0.5})  # a growing queue
    # the same queue under the line is capacity's; a few waiting a moment, or none, is a full busy pool
    assert not fires(kv_cache.check, engine={**queued, "kv_usage_max": 0.85})
    assert fires(saturation.check, engine={**queued, "kv_usage_max": 0.85, "waiting_slope": 0.5})
    assert not fires(kv_cache.check, engine={**queued, "queue_p99": 0.8, "waiting_max": 3})
    assert not fires(kv_cache.check, engine={**queued, "waiting_max": 0})


def test_a_healthy_verdict_says_which_steps_read_past_their_lines():
    result = diagnose(measurements(engine={"kv_usage_max": 0.97, "waiting_max": 0}, config=0.92), 0, 900, "t")
    assert result.bottleneck == "healthy" and result.exit_code == exitcodes.OK
    assert "within their thresholds" not in result.summary and "KV cache" in result.summary
    assert result.summary.startswith("healthy: no incident's conditions hold")


def test_the_triage_fails_step_one_when_preemptions_show_the_pool_ran_out():
    engine = {"kv_usage_max": 0.82, "preemption_rate": 0.4, "ttft_p99": 4.0}
    result = diagnose(measurements(engine=engine, config=0.92), 0, 900, "t")
    steps = {s.name: s for s in result.steps}
    assert result.bottleneck == "kv_cache_exhaustion" and result.exit_code == exitcodes.CRITICAL
    assert steps["kv_cache"].status == "fail" and "ran out between samples" in steps["kv_cache"].detail
    assert steps["preemption"].status == "fail"


def test_the_queue_step_counts_requests_held_at_the_gateway():
    backlog = t.QUEUE_BACKLOG.value
    quiet = {s.name: s for s in diagnose(measurements(engine={"held_max": 3}), 0, 900, "t").steps}["queue"]
    assert quiet.status == "ok" and "up to 3 held at the gateway" in quiet.detail
    held = {"waiting_max": backlog / 2, "held_max": backlog / 2}
    step = {s.name: s for s in diagnose(measurements(engine=held), 0, 900, "t").steps}["queue"]
    assert step.status == "fail"  # the engine's queue alone is under the backlog threshold
    alone = {s.name: s for s in diagnose(measurements(engine={"waiting_max": backlog / 2}), 0, 900, "t").steps}
    assert alone["queue"].status == "ok" and "held" not in alone["queue"].detail


def test_kv_remediation_uses_the_pool_size():
    ctx = Context.of(
        measurements(
            engine={
                "kv_usage_max": 0.97,
                "preemption_rate": 1,
                "kv_capacity_tokens": 100000,
                "prompt_p99": 6000,
            }
        )
    )
    finding = one(kv_cache.check, ctx)
    assert "100,000 tokens" in finding.remediation[0] and "--max-num-seqs 15" in finding.remediation[0]


def test_head_of_line_needs_a_long_prompt_tail_and_a_free_pool():
    hol = {"ttft_p50": 0.1, "ttft_p99": 3.0, "prompt_p99": 8000}
    assert fires(prefill.check, engine=hol)
    assert not fires(prefill.check, engine={**hol, "prompt_p99": 3000})  # no long prompts: not HOL
    assert not fires(prefill.check, engine={**hol, "ttft_p99": 0.9})  # tail ratio 9 < 10
    assert not fires(prefill.check, engine={**hol, "kv_usage_max": 0.95})  # a full pool is the KV check's
    assert not fires(prefill.check, engine={"ttft_p50": 0.01, "ttft_p99": 0.2, "prompt_p99": 8000})  # below floor


def test_saturation_needs_a_growing_queue_slow_queueing_and_an_even_tail():
    sat = {
        "waiting_slope": 0.1,
        "waiting_max": 60,
        "queue_p99": 4.0,
        "ttft_p50": 3.0,
        "ttft_p99": 9.0,
    }
    assert fires(saturation.check, engine=sat)
    assert not fires(saturation.check, engine={**sat, "waiting_slope": 0.005})
    assert not fires(saturation.check, engine={**sat, "queue_p99": 0.9})
    assert not fires(saturation.check, engine={**sat, "preemption_rate": 1.0})


def test_prefix_miss_is_a_drop_not_a_low_level():
    assert fires(
        prefix.check,
        engine={"prefix_hit_before": 0.85, "prefix_hit_recent": 0.3, "prefix_queries_recent": 100},
    )
    assert fires(
        prefix.check,
        engine={"prefix_hit_before": 0.5, "prefix_hit_recent": 0.2, "prefix_queries_recent": 100},
    )
    assert not fires(
        prefix.check,
        engine={"prefix_hit_before": 0.3, "prefix_hit_recent": 0.28, "prefix_queries_recent": 100},
    )
    assert not fires(
        prefix.check,
        engine={"prefix_hit_before": 0.85, "prefix_hit_recent": 0.76, "prefix_queries_recent": 100},
    )


def test_memory_is_judged_against_the_engines_budget_not_the_card():
    full = {"fb_used_max": 0.94 * 81559, "fb_free_min": 0.06 * 81559 - 512}
    assert not fires(memory.check, gpu=full, config=0.92)  # 94 % on a 92 % engine: within 3 points
    assert fires(memory.check, gpu=full, config=0.88)  # 94 % on an 88 % engine: someone else's
    # an engine scraped elsewhere says nothing about this GPU (the alert joins on instance too)
    assert not fires(memory.check, gpu=full, config=0.88, config_instance="10.0.0.9:8000")
    leaking = {"fb_used_max": 80000, "fb_free_min": 1047, "fb_used_slope": 3.0}
    assert fires(memory.check, gpu=leaking)  # no budget known: above gpu_memory_full


def test_hardware_faults_by_xid_bucket():
    def xid(code, value=1):
        m = measurements()
        m.values["xid_increase"] = [Value(value, {**GPU, "xid": str(code)}, "q:xid")]
        return one(hardware.check, Context.of(m))

    assert xid(79).severity.value == "critical" and "fallen off the bus" in xid(79).summary
    assert xid(13).severity.value == "warning"
    assert xid(63) is None  # catalog: ignore
    assert xid(79, value=0) is None
    m = measurements(gpu={"xid_changed": 0, "xid_last": 48})
    assert one(hardware.check, Context.of(m)) is None  # sticky and unchanged in the window: old news
    m = measurements(gpu={"xid_changed": 1, "xid_last": 48})
    assert "double-bit ECC" in one(hardware.check, Context.of(m)).summary
    assert one(hardware.check, Context.of(measurements(gpu={"row_remap_failure": 1}))) is not None


def test_throttling_needs_a_busy_gpu_below_base_and_a_cause():
    hot = {"temp_max": 91, "sm_clock_avg": 1100}
    assert fires(throttling.check, gpu=hot)
    assert not fires(throttling.check, gpu={**hot, "gpu_util_avg": 5})  # idle clocks are low by design
    assert not fires(throttling.check, gpu={"temp_max": 91, "sm_clock_avg": 1500})  # 1500 >= 0.9 x 1590 base
    assert fires(throttling.check, gpu={"power_avg": 695, "sm_clock_avg": 1200})  # at the H100's 700 W


def test_pcie_saturation_uses_what_the_link_achieves_and_degradation_the_max():
    # Gen5 x16: 63 GB/s nominal per direction, 51.7 GB/s achievable (pcie_achievable_share 0.82)
    assert fires(pcie.check, gpu={"pcie_rx_avg": 45e9})  # 87 % of achievable, 71 % of nominal
    assert not fires(pcie.check, gpu={"pcie_rx_avg": 38e9})  # 73 % of achievable
    assert fires(pcie.check, gpu={"pcie_gen": 3, "pcie_max_gen": 5, "pcie_width": 16, "pcie_max_width": 16})


def test_an_idle_gpus_lowered_link_is_power_saving_a_busy_ones_is_a_fault():
    """A GPU lowers its link's generation and width when idle and trains it back up for work:
    the best the link reached while the GPU worked is what is judged (tests/scenarios/reality4.py)."""
    link = {"pcie_max_gen": 5, "pcie_max_width": 16, "pcie_rx_avg": 3e6, "pcie_tx_avg": 1e6}
    idle = {**link, "pcie_gen": 1, "pcie_width": 16, "gpu_util_avg": 0}
    assert not fires(pcie.check, gpu=idle)
    assert not fires(pcie.check, gpu={**idle, "pcie_width": 8, "gpu_util_avg": 12})  # below the floor: idle
    assert not fires(pcie.check, gpu={**idle, "gpu_util_avg": None})  # its use unknown: nothing claimed
    assert fires(pcie.check, gpu={**idle, "gpu_util_avg": 40})  # worked, and never above Gen1
    busy_x8 = {**link, "pcie_gen": 5, "pcie_width": 8, "gpu_util_avg": 78}
    found = one(pcie.check, Context.of(measurements(gpu=busy_x8)))
    assert found is not None and found.severity is Severity.WARNING
    assert "at best Gen5 x8 while 78 % busy (capable of Gen5 x16)" in found.summary
    assert {e.query.split(":")[-1] for e in found.evidence} >= {"pcie_width", "pcie_max_width", "gpu_util_avg"}
    # a MIG instance or a profiling-only node: the graphics engine's activity says it worked
    assert fires(pcie.check, gpu={**busy_x8, "gpu_util_avg": None, "gr_active_avg": 0.7})


def test_decode_bound_when_itl_is_high_and_nothing_else_explains_it():
    assert fires(decode.check, engine={"itl_p99": 0.3})
    assert not fires(decode.check, engine={"itl_p99": 0.3, "queue_p99": 2.0})
    assert not fires(decode.check, engine={"itl_p99": 0.19})


def test_gateway_share_and_idle_gpus():
    assert fires(gateway.check, engine={"gateway_mean": 0.5, "e2e_mean": 1.0})
    assert not fires(gateway.check, engine={"gateway_mean": 0.1, "e2e_mean": 1.0})
    assert fires(underutilized.check, gpu={"gpu_util_avg": 5}, engine={"waiting_max": 0})
    assert not fires(underutilized.check, gpu={"gpu_util_avg": 25}, engine={"waiting_max": 0})


def test_idle_gpus_are_excused_only_by_a_queue_that_can_be_theirs():
    idle = {"gpu_util_avg": 5}
    # the engine and the GPU share no label: a busy neighbour's waiting request or two (another
    # model, another node) excuses nothing; a backlog or a slow queue may be theirs
    assert fires(underutilized.check, gpu=idle, engine={"waiting_max": 2})
    assert not fires(underutilized.check, gpu=idle, engine={"waiting_max": 150})
    assert not fires(underutilized.check, gpu=idle, engine={"waiting_max": 2, "queue_p99": 3.0})
    # joined (kvscope export re-exposes its node's engines: the same instance), any waiting request
    m = measurements(gpu=idle, engine={"waiting_max": 2})
    for values in m.values.values():
        for v in values:
            if v.labels.get("pod") == ENGINE["pod"]:
                v.labels = {**v.labels, "instance": GPU["instance"]}
    assert not underutilized.check(Context.of(m))


def _gpu_fleet(idle_hosts: int, busy_hosts: int, per_host: int = 4) -> Context:
    """`idle_hosts` machines whose GPUs all sit at 5 % and `busy_hosts` at 70 %, no engine queueing."""
    m = measurements(engine={"waiting_max": 0})
    for name in BASE_GPU:
        m.values[name] = []
    for h in range(idle_hosts + busy_hosts):
        host = f"node-{h}"
        for g in range(per_host):
            labels = {**GPU, "instance": f"{host}:9400", "Hostname": host, "gpu": str(g), "UUID": f"GPU-{h}-{g}"}
            for name, v in {**BASE_GPU, "gpu_util_avg": 5 if h < idle_hosts else 70}.items():
                m.values[name].append(Value(float(v), labels, f"q:{name}"))
    return Context.of(m)


def test_idle_machines_are_found_however_many_busy_ones_stand_beside():
    # a pool of idle machines is idle capacity whether it is the fleet or 8x busy machines stand
    # beside it (the metamorphic suite's 8x-healthy-nodes on the library's `idle`); one idle
    # machine beside busy ones is a warm spare (N+1), not a cost finding
    for busy in (0, 24, 192):
        found = underutilized.check(_gpu_fleet(3, busy))
        assert [f.id for f in found] == ["gpu_underutilized"], busy
        assert len(found[0].affected) == 12
    assert not underutilized.check(_gpu_fleet(1, 2))
    assert not underutilized.check(_gpu_fleet(1, 24))
    assert underutilized.check(_gpu_fleet(1, 0))  # the whole fleet: no busy machine to spare for


def test_a_mig_instance_is_judged_by_its_graphics_activity_alone():
    def mig(gpu: dict) -> Context:
        m = measurements(gpu=gpu, engine={"waiting_max": 0})
        for values in m.values.values():
            for v in values:
                if v.labels.get("UUID"):
                    v.labels = {**v.labels, "GPU_I_ID": "1", "GPU_I_PROFILE": "3g.40gb"}
        return Context.of(m)

    # dcgm-exporter 3.x writes GPU_UTIL 0 on a MIG instance (NVIDIA/dcgm-exporter#216): a busy 3g
    # instance's engine activity (33 %) is what it did; with no activity its use is unknown
    assert not underutilized.check(mig({"gpu_util_avg": 0, "gr_active_avg": 0.33}))
    assert not underutilized.check(mig({"gpu_util_avg": 0, "gr_active_avg": None}))
    assert underutilized.check(mig({"gpu_util_avg": 0, "gr_active_avg": 0.05}))


def test_the_root_cause_explains_its_symptoms_on_its_own_machine():
    queue = {"waiting_max": 150, "waiting_slope": 0.5, "queue_p99": 4.0}
    m = measurements(engine=queue)
    # dcgm-exporter's pod mapping names the engine's pod on its GPU: one machine
    m.values["xid_increase"] = [Value(1, {**GPU, "pod": "vllm-0", "namespace": "prod", "xid": "79"}, "q")]
    result = diagnose(m, 0, 900, "t")
    assert [i.id for i in result.incidents] == ["gpu_hardware_fault"]
    assert result.incidents[0].explains == ["capacity_saturation"]
    assert {f.id for f in result.findings} == {"gpu_hardware_fault", "capacity_saturation"}
    assert result.severity.value == "critical" and result.exit_code == exitcodes.CRITICAL


def test_two_faults_on_two_machines_are_two_incidents():
    m = measurements(engine={"kv_usage_max": 0.97, "preemption_rate": 1.0})
    m.values["xid_increase"] = [Value(1, {**GPU, "xid": "79"}, "q")]  # a GPU the data joins to no engine
    result = diagnose(m, 0, 900, "t")
    assert sorted(i.id for i in result.incidents) == ["gpu_hardware_fault", "kv_cache_exhaustion"]
    assert result.bottleneck == result.incidents[0].id and "1 more incident" in result.summary


def test_confidence_grows_with_the_margin_and_the_signals_that_agree():
    from diagnosis.findings import Evidence, confidence_of

    barely = Evidence("q", 0.91, 0.9, {}, "kv")
    far = Evidence("q", 1.8, 0.9, {}, "kv")
    other = Evidence("q2", 0.2, 0.05, {}, "preempt")
    missed = Evidence("q3", 0.5, 0.9, {}, "kv2")  # not past its line: no support
    assert confidence_of([barely]) < confidence_of([far]) < confidence_of([far, other])
    assert confidence_of([barely, missed]) == confidence_of([barely])
    assert confidence_of([Evidence("q", 0.08, 0.75, {}, "hit", above=False)]) > 0.8  # fell far below


def test_partial_data_is_not_no_data():
    m = measurements(engine={"waiting_max": 40, "waiting_slope": 0.5, "queue_p99": 8.0})
    del m.values["kv_usage_max"]  # a page without the KV gauge: the queue checks still run
    assert diagnose(m, 0, 900, "t").bottleneck == "capacity_saturation"
    gpus_only = measurements(gpu={"temp_max": 91, "sm_clock_avg": 1100})
    for name in BASE_ENGINE:
        del gpus_only.values[name]
    result = diagnose(gpus_only, 0, 900, "t")  # a GPU node without vLLM: its hardware is still read
    assert result.bottleneck == "thermal_power_throttling"
    result = diagnose(Measurements(), 0, 900, "t")
    assert result.bottleneck == "insufficient_data" and result.exit_code == exitcodes.UNDIAGNOSABLE
    assert result.missing[0] == "vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc"


def test_a_threshold_changed_in_kvscope_yaml_moves_the_check(tmp_path):
    path = tmp_path / "kvscope.yaml"
    path.write_text("thresholds: {preemption_rate: 2.0, itl_p99: 0.4}\n")
    limits = config.load(path).thresholds
    preempting = {"kv_usage_max": 0.97, "preemption_rate": 1.0}
    assert fires(kv_cache.check, engine=preempting)  # 1/s is over the default 0.05/s
    assert not fires(kv_cache.check, limits=limits, engine=preempting)  # and under the user's 2/s
    assert fires(decode.check, engine={"itl_p99": 0.3})
    assert not fires(decode.check, limits=limits, engine={"itl_p99": 0.3})
    result = diagnose(measurements(engine=preempting), 0, 900, "t", config.load(path))
    assert result.bottleneck == "healthy"
    assert "threshold 2/s" in next(s.detail for s in result.steps if s.name == "preemption")


def test_a_capped_queue_that_refuses_requests_is_saturated():
    capped = {"waiting_max": 64, "waiting_slope": 0.0, "queue_p99": 0.5, "rejection_rate": 2.0}
    found = one(saturation.check, Context.of(measurements(engine=capped)))
    assert found is not None and "2.00 requests/s refused" in found.summary
    assert not fires(saturation.check, engine={**capped, "rejection_rate": 0.0})


def test_a_full_pool_whose_requests_wait_at_the_gateway_has_run_out_too():
    # kvscope serve's KV lanes hold long prompts at the gateway instead of letting vLLM preempt
    held = {"kv_usage_max": 0.95, "preemption_rate": 0.02, "held_max": 2}
    found = one(kv_cache.check, Context.of(measurements(engine=held)))
    assert found is not None and found.severity.value == "warning"
    assert "held at the gateway" in found.summary and "the others are unaffected" in found.summary
    assert not fires(kv_cache.check, engine={**held, "kv_usage_max": 0.7})  # a lane waiting on a free pool


def _server_with_engine(engine: dict, server: dict) -> Measurements:
    """What kvscope serve writes: its engine's series (an `engine` label) and its gateway's, which
    count the whole server and carry no `engine` label."""
    m = measurements(engine=engine)
    for values in m.values.values():
        for v in values:
            if v.labels.get("pod") == ENGINE["pod"]:
                v.labels["engine"] = "0"
    for name, v in server.items():
        m.values[name] = [Value(float(v), dict(ENGINE), f"q:{name}")]
    return m


def test_requests_held_at_the_servers_gateway_count_against_its_engines_full_pool():
    # the drill's tuned run on a slow CI machine: the pool full, few preemptions (the watermark and
    # the lanes prevent them), the queue slow, and the lane's held requests on the gateway's series
    engine = {"kv_usage_max": 0.94, "preemption_rate": 0.04, "waiting_max": 27, "queue_p99": 1.84}
    m = _server_with_engine(engine, {"held_max": 7})
    found = one(kv_cache.check, Context.of(m))
    assert found is not None and "up to 7 requests held at the gateway" in found.summary
    assert [a.get("engine") for a in found.affected] == ["0"]  # the engine, not the server's view
    result = diagnose(m, 0, 900, "t")
    assert result.bottleneck == "kv_cache_exhaustion"
    quiet = _server_with_engine({**engine, "kv_usage_max": 0.7}, {"held_max": 7})
    assert not kv_cache.check(Context.of(quiet))  # a lane waiting while the pool has room


def test_a_slow_growing_queue_with_an_uneven_tail_and_no_long_prompts_is_saturation():
    # priority scheduling serves the interactive class first: its TTFT stays low while the rest
    # wait, so the tail is far above the median without any long prompt to blame
    uneven = {
        "waiting_slope": 0.1,
        "waiting_max": 60,
        "queue_p99": 4.0,
        "ttft_p50": 0.2,
        "ttft_p99": 9.0,
        "prompt_p50": 300,
        "prompt_p99": 900,
    }
    assert fires(saturation.check, engine=uneven)
    assert diagnose(measurements(engine=uneven), 0, 900, "t").bottleneck == "capacity_saturation"
    # with a long-prompt tail it is the prefill check's, not saturation's
    hol = {**uneven, "prompt_p99": 12000}
    assert not fires(saturation.check, engine=hol)
    assert diagnose(measurements(engine=hol), 0, 900, "t").bottleneck == "prefill_head_of_line"


def _decode_on(gpu_extra: dict, engine: dict | None = None):
    """Slow decode on an engine whose GPUs kvscope export scraped with it (one scope)."""
    m = measurements(engine={"itl_p99": 0.3, **(engine or {})})
    gpu_labels = {**GPU, "instance": ENGINE["instance"], **gpu_extra}
    for name in BASE_GPU:
        m.values[name] = [Value(m.values[name][0].value, dict(gpu_labels), f"q:{name}")]
    return Context.of(m)


def test_decode_bound_names_hbm_only_on_a_real_gpu():
    real = one(decode.check, _decode_on({}))
    emulated = one(decode.check, _decode_on({"emulated": "true"}))
    assert real is not None and "HBM" in real.summary
    assert emulated is not None and "HBM" not in emulated.summary and "no real GPU" in emulated.summary


def test_an_engine_whose_queue_grows_is_not_decode_bound_however_slow_its_steps():
    # an overloaded CPU engine: big batches make every step slow, and requests pile up
    assert one(decode.check, _decode_on({"emulated": "true"}, {"waiting_slope": 0.5})) is None
    assert one(decode.check, _decode_on({"emulated": "true"}, {"waiting_slope": 0.005})) is not None


def test_the_kernel_step_makes_no_claim_on_emulated_gpus():
    result = diagnose(_decode_on({"emulated": "true"}).m, 0, 900, "test")
    kernels = next(s for s in result.steps if s.step == 5)
    assert kernels.status == "skipped" and "emulated" in kernels.detail and "HBM" not in kernels.detail
