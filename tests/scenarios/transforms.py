"""Metamorphic transforms: the same fleet in another shape. A verdict, its active incidents and
their scopes must not change when only the data's shape does: more healthy nodes beside it, the
other spelling of the host label, the instance relabelled to the pod's name, an unrelated healthy
model, another scrape step, a longer window (issue 20). A transform that changes a verdict is a
bug in the check, not in the transform.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from tests.scenarios import library, reality, reality2, reality3, reality4
from tests.scenarios.fleet import Instance, State


@dataclass(frozen=True)
class Fleet:
    """One case as the suite runs it: its instances, how it was recorded and diagnosed."""

    name: str
    instances: list[Instance] = field(default_factory=list)
    extras: bool = False  # kvscope serve's own series (library scenarios that need them)
    step: float = 30.0  # seconds between samples
    window: float = 900.0  # the diagnosis window
    lead: float = 0.0  # minutes recorded before the case's minute 0 (a longer window's baseline)


LEAD_FOR_AN_HOUR = 65.0  # the diagnosis at minute 57: the window from -3, its baseline from -63


def seeded(key: str) -> State:
    """A healthy state that differs by `key` (load, KV, latency, heat): siblings, not exact copies."""
    k = zlib.crc32(key.encode()) % 1000 / 1000  # 0..1, fixed per key
    return replace(
        State(), rate=4.0 + 2.0 * k, kv=0.35 + 0.2 * k, running=15 + 10 * k, util=55 + 20 * k, temp=58 + 8 * k
    )


def _healthy(name: str, count: int, model: str | None = None) -> list[Instance]:
    """`count` healthy instances that differ by seed (load, KV, latency), not exact copies."""
    out = []
    for i in range(count):
        state = seeded(f"{name}-{i}")
        inst = Instance(f"vllm-{name}-{i}", lambda m, s=state: s)
        out.append(replace(inst, model=model) if model else inst)
    return out


def _restyled(f: Fleet, **kw: object) -> Fleet:
    return replace(f, instances=[replace(i, **kw) for i in f.instances])  # type: ignore[arg-type]


TRANSFORMS: dict[str, Callable[[Fleet], Fleet | None]] = {
    "hostname": lambda f: _restyled(f, host_label="hostname"),
    "instance-is-the-pod": lambda f: (
        None if any(i.instance_style != "host" for i in f.instances) else _restyled(f, instance_style="pod")
    ),
    # beside the fleet: a case with no series at all has nothing to stand beside
    "other-healthy-model": lambda f: (
        replace(f, instances=[*f.instances, *_healthy("om", 3, "qwen-2.5-7b")]) if f.instances else None
    ),
    "8x-healthy-nodes": lambda f: replace(f, instances=[*f.instances, *_healthy("hx", 8 * len(f.instances))]),
    "64x-healthy-nodes": lambda f: replace(f, instances=[*f.instances, *_healthy("hy", 64 * len(f.instances))]),
    "step-15s": lambda f: replace(f, step=15.0),
    "step-60s": lambda f: replace(f, step=60.0),
    "window-30m": lambda f: replace(f, window=1800.0),
    # an hour, with the hour before it as its baseline: the case's own states before its minute 0
    "window-1h": lambda f: replace(f, window=3600.0, lead=LEAD_FOR_AN_HOUR),
}


def fleets() -> list[tuple[Fleet, set[str]]]:
    """Every case of the library and the reality splits, with the names the original names."""
    out = [(Fleet(s.name, s.instances, s.kvscope_extras), {i.name for i in s.instances}) for s in library.scenarios()]
    for case in (*reality.cases(), *reality2.cases(), *reality3.cases(), *reality4.cases()):
        out.append((Fleet(case.name, case.instances), {i.name for i in case.instances}))
    return out


HEAVY = ("8x-healthy-nodes", "64x-healthy-nodes")  # thousands more series: bench.metamorphic runs them, CI not
SPARSE = {"64x-healthy-nodes": 10}  # on every n-th case only (each one a fleet of hundreds of nodes)


def variants(per_case: int | None = None) -> Iterator[tuple[str, Fleet, Fleet]]:
    """(transform, original, transformed) for each case; `per_case`: that many of the light
    transforms per case, rotating through them (every transform meets a share of the cases);
    None: every transform on every case."""
    light = [name for name in TRANSFORMS if name not in HEAVY]
    for n, (original, _) in enumerate(fleets()):
        if per_case is None:
            chosen = [name for name in TRANSFORMS if n % SPARSE.get(name, 1) == 0]
        else:
            chosen = [light[(n * per_case + j) % len(light)] for j in range(per_case)]
        for transform in chosen:
            shaped = TRANSFORMS[transform](original)
            if shaped is not None:
                yield transform, original, replace(shaped, name=f"{original.name}~{transform}")
