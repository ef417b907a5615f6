"""Emulated GPUs follow the engine they are attached to, say they are emulated, and bend the
way real GPUs do under each injected fault."""

import pytest
from pydantic import ValidationError

from exporter.collectors.emulated import EmulatedSource
from exporter.collectors.gpu import GpuCollector
from exporter.collectors.xid import XidCollector, XidCounts
from exporter.exposition import render
from exporter.faults import Fault
from kvscope import catalog, promtext


class Engine:
    """Samples of one attached engine, as the vLLM collector hands them over."""

    def __init__(self) -> None:
        self.running, self.prompt, self.generated = 0.0, 0.0, 0.0

    def samples(self):
        s = promtext.Sample
        return {
            "http://127.0.0.1:1/metrics": [
                s(catalog.VLLM_REQUESTS_RUNNING.name, {}, self.running),
                s(catalog.VLLM_PROMPT_TOKENS.name, {}, self.prompt),
                s(catalog.VLLM_GENERATION_TOKENS.name, {}, self.generated),
                s(catalog.VLLM_KV_CACHE_USAGE.name, {}, 0.5),
                s(catalog.VLLM_CACHE_CONFIG_INFO.name, {"gpu_memory_utilization": "0.9"}, 1.0),
            ]
        }


@pytest.fixture
def node():
    clock = [0.0]
    engine = Engine()
    counts = XidCounts()
    source = EmulatedSource(2, "H100", engine.samples, counts, clock=lambda: clock[0])
    return source, engine, clock, counts


def read(source, counts=None):
    families = list(GpuCollector(source).collect())
    if counts is not None:
        families += list(XidCollector(counts).collect())
    return promtext.parse(render(families).decode())


def one(samples, signal, **labels):
    found = promtext.select(samples, signal.name, **labels)
    assert len(found) == 1, (signal.name, labels, found)
    return found[0].value


def test_every_series_says_it_is_emulated(node):
    source, *_ = node
    samples = read(source)
    gpu_series = [s for s in samples if s.name.startswith(("DCGM_", "kvscope_gpu_")) and "gpu" in s.labels]
    assert gpu_series and all(s.labels["emulated"] == "true" for s in gpu_series)


def test_memory_is_what_vllm_reserves_so_a_healthy_node_reads_90_percent(node):
    source, *_ = node
    samples = read(source)
    used, free = (
        one(samples, catalog.DCGM_FB_USED, gpu="0"),
        one(samples, catalog.DCGM_FB_FREE, gpu="0"),
    )
    assert 0.88 < used / (used + free + 512) < 0.92


def test_utilisation_power_and_clocks_follow_the_engine(node):
    source, engine, clock, _ = node
    idle = read(source)
    engine.running, engine.prompt, engine.generated = 8, 20000, 2000
    clock[0] = 10.0
    busy = read(source)
    assert one(idle, catalog.DCGM_GPU_UTIL, gpu="0") < 5 < 80 < one(busy, catalog.DCGM_GPU_UTIL, gpu="0")
    assert one(busy, catalog.DCGM_POWER_USAGE, gpu="0") > one(idle, catalog.DCGM_POWER_USAGE, gpu="0")
    assert one(busy, catalog.DCGM_SM_CLOCK, gpu="0") == 1980


def test_xid_79_is_counted_and_the_gpu_falls_off_the_bus(node):
    source, _, _, counts = node
    source.inject(Fault(gpu=1, fault="xid", xid=79))
    samples = read(source, counts)
    assert one(samples, catalog.GPU_XID_ERRORS, gpu="1", xid="79") == 1
    assert {s.labels["gpu"] for s in promtext.select(samples, catalog.DCGM_GPU_UTIL.name)} == {"0"}
    source.clear()
    assert {s.labels["gpu"] for s in promtext.select(read(source), catalog.DCGM_GPU_UTIL.name)} == {
        "0",
        "1",
    }


def test_an_app_level_xid_leaves_the_gpu_up_with_the_sticky_dcgm_value(node):
    source, _, _, counts = node
    source.inject(Fault(gpu=0, fault="xid", xid=13))
    samples = read(source, counts)
    assert one(samples, catalog.DCGM_XID_ERRORS, gpu="0") == 13
    assert promtext.select(samples, catalog.DCGM_XID_ERRORS.name)[0].labels["err_code"] == "13"


def test_thermal_fault_heats_and_throttles(node):
    source, engine, _, _ = node
    engine.running = 8
    source.inject(Fault(gpu=0, fault="thermal", temp_c=95))
    samples = read(source)
    assert one(samples, catalog.DCGM_GPU_TEMP, gpu="0") == 95
    assert one(samples, catalog.DCGM_SM_CLOCK, gpu="0") < one(samples, catalog.DCGM_APP_SM_CLOCK, gpu="0")
    assert one(samples, catalog.GPU_CLOCK_EVENT_ACTIVE, gpu="0", reason="sw_thermal_slowdown") == 1
    assert one(samples, catalog.DCGM_GPU_TEMP, gpu="1") < 90


def test_power_cap_holds_power_at_the_limit_and_says_why(node):
    source, engine, *_ = node
    engine.running = 16
    source.inject(Fault(gpu=0, fault="power_cap", limit_w=300))
    samples = read(source)
    assert one(samples, catalog.DCGM_POWER_USAGE, gpu="0") == one(samples, catalog.DCGM_POWER_LIMIT, gpu="0") == 300
    assert one(samples, catalog.GPU_CLOCK_EVENT_ACTIVE, gpu="0", reason="sw_power_cap") == 1


def test_an_idle_gpus_link_drops_to_gen1_and_trains_up_for_work(node):
    """NVIDIA's GPUs lower the link's generation while idle (nvidia-smi: it 'may be reduced when
    the GPU is not in use'): an idle emulated GPU reads Gen1 at full width, a busy one its best."""
    source, engine, *_ = node
    samples = read(source)
    assert one(samples, catalog.DCGM_PCIE_LINK_GEN, gpu="0") == 1
    assert one(samples, catalog.DCGM_PCIE_LINK_WIDTH, gpu="0") == one(
        samples, catalog.DCGM_PCIE_MAX_LINK_WIDTH, gpu="0"
    )
    engine.running = 8
    samples = read(source)
    assert one(samples, catalog.DCGM_PCIE_LINK_GEN, gpu="0") == one(samples, catalog.DCGM_PCIE_MAX_LINK_GEN, gpu="0")


def test_degraded_link_drops_generation_and_width_and_replays_grow(node):
    source, engine, clock, _ = node
    engine.running = 8  # at work: an idle GPU's link is at Gen1 whatever its fault
    source.inject(Fault(gpu=1, fault="pcie_degraded", generation=3, width=8))
    read(source)
    clock[0] = 10.0
    samples = read(source)
    assert (
        one(samples, catalog.DCGM_PCIE_LINK_GEN, gpu="1") == 3
        and one(samples, catalog.DCGM_PCIE_LINK_WIDTH, gpu="1") == 8
    )
    assert one(samples, catalog.DCGM_PCIE_MAX_LINK_GEN, gpu="1") == 5
    assert one(samples, catalog.DCGM_PCIE_REPLAY, gpu="1") > 0
    assert one(samples, catalog.GPU_PCIE_LINK_CAPACITY, gpu="1") < one(
        samples, catalog.GPU_PCIE_LINK_MAX_CAPACITY, gpu="1"
    )


def test_saturated_link_runs_at_the_ratio_of_capacity(node):
    source, *_ = node
    source.inject(Fault(gpu=0, fault="pcie_saturated", ratio=0.9))
    samples = read(source)
    assert one(samples, catalog.DCGM_PCIE_TX_BYTES, gpu="0") == pytest.approx(
        0.9 * one(samples, catalog.GPU_PCIE_LINK_CAPACITY, gpu="0")
    )


def test_memory_leak_grows_memory_beyond_the_engine_budget(node):
    source, _, clock, _ = node
    before = one(read(source), catalog.DCGM_FB_USED, gpu="0")
    source.inject(Fault(gpu=0, fault="memory_leak", mib_per_minute=6000))
    clock[0] = 60.0
    assert one(read(source), catalog.DCGM_FB_USED, gpu="0") == pytest.approx(before + 6000, rel=0.01)


def test_colocated_process_takes_memory_and_shows_as_a_process(node):
    source, *_ = node
    before = one(read(source), catalog.DCGM_FB_USED, gpu="0")
    source.inject(Fault(gpu=0, fault="colocated_process", mib=4000))
    source_readings = source.read()
    assert source_readings[0][1].fb_used_mib == pytest.approx(before + 4000)
    assert any(pid >= 900_000 for pid, _ in source_readings[0][1].processes)


def test_row_remap_failure_sets_the_failure_flag(node):
    source, *_ = node
    source.inject(Fault(gpu=1, fault="row_remap_failure"))
    samples = read(source)
    assert one(samples, catalog.DCGM_ROW_REMAP_FAILURE, gpu="1") == 1
    assert one(samples, catalog.DCGM_ROW_REMAP_FAILURE, gpu="0") == 0


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"gpu": 0, "fault": "meltdown"}, "fault"),
        ({"gpu": 0, "fault": "xid"}, "needs an 'xid'"),
        ({"gpu": -1, "fault": "thermal"}, "gpu"),
        ({"gpu": 0, "fault": "thermal", "xid": 79}, "takes ['temp_c']"),
        ({"gpu": 0, "fault": "thermal", "colour": "red"}, "colour"),
    ],
)
def test_bad_faults_are_refused_with_the_reason(payload, message):
    with pytest.raises(ValidationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Fault.model_validate(payload)


def test_a_fault_on_a_gpu_that_does_not_exist_is_refused(node):
    source, *_ = node
    with pytest.raises(ValueError, match="gpu 7 does not exist: this node has 2 GPUs"):
        source.inject(Fault(gpu=7, fault="thermal"))


def test_emulated_mig_serves_each_instance_as_a_device_without_utilisation():
    engine = Engine()
    engine.running = 4
    source = EmulatedSource(2, "H100", engine.samples, XidCounts(), clock=lambda: 0.0, mig="3g.40gb,1g.10gb")
    samples = read(source)
    instances = promtext.select(samples, catalog.DCGM_FB_USED.name, gpu="1", GPU_I_PROFILE="1g.10gb")
    assert len(instances) == 1 and instances[0].labels["emulated"] == "true"
    assert instances[0].labels["GPU_I_ID"] == "2" and instances[0].labels["UUID"] == source.identities[1].uuid
    big = one(samples, catalog.DCGM_FB_USED, gpu="0", GPU_I_PROFILE="3g.40gb")
    assert big == pytest.approx(40 * 1024 * 0.9)  # the engine's memory share of its instance
    assert not promtext.select(samples, catalog.DCGM_GPU_UTIL.name)  # no utilisation under MIG
    assert one(samples, catalog.DCGM_POWER_USAGE, gpu="0") > 0  # device-level readings stay, once


@pytest.mark.parametrize(("layout", "message"), [("2g", "not like 1g.10gb"), ("7g.80gb,1g.10gb", "needs 8 slices")])
def test_a_mig_layout_that_does_not_fit_is_refused(layout, message):
    with pytest.raises(ValueError, match=message):
        EmulatedSource(1, "H100", mig=layout)
