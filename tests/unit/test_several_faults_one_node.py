"""Several GPUs of one node failing at once, each its own way (the combined drill
`kvscope drill gpu-xid+thermal+pcie-degraded+memory-leak` found both of these): every fault is its
own incident on its own GPU (an XID on GPU 0 does not explain GPU 1's heat), and a GPU is one GPU
whichever series name it (kvscope's XID counter carries no host label, DCGM's fields do).

A node's GPUs failing together is ordinary: a failed fan or a bad riser takes more than one, and
the Llama 3 report counts 419 unexpected interruptions in 54 days on 16,384 H100s, GPU and HBM
faults first (Meta, "The Llama 3 Herd of Models", 2024, table 5)."""

from __future__ import annotations

from dataclasses import replace

from diagnosis.measures import MEASURES
from diagnosis.sources.scrape import compute
from diagnosis.verdict import diagnose
from kvscope import catalog, promtext
from tests.scenarios.fleet import Instance, Simulation, State, page

HEALTHY = State()
XID = replace(HEALTHY, xid=79)
HOT = replace(HEALTHY, temp=94, sm_clock=1100, clock_events=("hw_thermal_slowdown",))


def _node(*engines: State) -> Instance:
    """One node, GPU i serving engine i; its faults start at minute 50, an XID (the sticky
    gauge counts when it changes) between the two scrapes."""
    return Instance(
        "vllm-multi-0",
        lambda m: HEALTHY,
        gpus=len(engines),
        engines=tuple((lambda m, s=s: s if m >= (57.5 if s.xid else 50) else HEALTHY) for s in engines),
    )


def _diagnosed(inst: Instance, xid_counter: bool = False):
    """The verdict over two scrapes a minute apart at minute 57; `xid_counter`: kvscope export's
    own XID counter beside DCGM's fields, labelled as kvscope writes it (gpu, UUID, xid)."""
    sim = Simulation([inst])
    snapshots = []
    for n, minute in enumerate((57.0, 58.0)):
        while sim.minute < minute:
            sim.step(30.0)
        text = page(sim)
        if xid_counter:
            labels = inst.gpu(0)
            text += (
                f'{catalog.GPU_XID_ERRORS.name}{{gpu="0",UUID="{labels["UUID"]}",xid="79"}} {n}\n'
                f'{catalog.GPU_XID_ERRORS.name}{{gpu="1",UUID="{inst.gpu(1)["UUID"]}",xid="79"}} 0\n'
            )
        read, _ = promtext.parse_lenient(text)
        snapshots.append((60.0 * n, read))
    return diagnose(compute(MEASURES, snapshots, "pages"), 0, 60, "pages")


def _incidents(result) -> list[tuple[str, list[str]]]:
    return [(i.id, sorted({a["gpu"] for a in i.affected if "gpu" in a})) for i in result.incidents]


def test_an_xid_on_one_gpu_does_not_explain_the_heat_of_another():
    result = _diagnosed(_node(XID, HOT))
    assert ("gpu_hardware_fault", ["0"]) in _incidents(result), result.summary
    assert ("thermal_power_throttling", ["1"]) in _incidents(result), result.summary


def test_a_gpu_named_by_kvscope_and_by_dcgm_is_one_gpu():
    result = _diagnosed(_node(XID, HEALTHY), xid_counter=True)
    hardware = [i for i in result.incidents if i.id == "gpu_hardware_fault"]
    assert len(hardware) == 1 and "more GPU" not in hardware[0].summary, result.summary
    assert sorted({a["gpu"] for a in hardware[0].affected if "gpu" in a}) == ["0"]
