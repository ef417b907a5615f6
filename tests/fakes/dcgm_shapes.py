"""A dcgm-exporter 4.8 page rewritten as 4.9.0 or 4.10.0 would serve it: the renamed default fields
(kvscope/catalog.py's DCGM_EXPORTER_RENAMES), their values in the new units (Hz, bytes, J, 0-1
ratios), the driver label renamed. DCGM's blank sentinels stay blank (the exporter writes them
raw, whatever the unit). NVLink's counter has no one-sample equivalent and keeps its 4.8 name."""

from __future__ import annotations

import re
from collections.abc import Iterable

from kvscope import catalog, promtext

_DRIVER_OLD, _DRIVER_NEW = catalog.DCGM_DRIVER_LABELS
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?(\s+)(\S+)(.*)$")
_META = re.compile(r"^(# (?:HELP|TYPE) )([a-zA-Z_:][a-zA-Z0-9_:]*)(.*)$")


def _value(text: str, factor: float) -> str:
    try:
        number = float(text)
    except ValueError:
        return text
    if factor == 1.0 or catalog.is_dcgm_blank(int(number) if number.is_integer() else number):
        return text
    return repr(number * factor)


def reshape_page(text: str, shape: str) -> str:
    """The page text as `shape` ("4.8", "4.9", "4.10") writes it."""
    out = []
    for line in text.splitlines():
        if meta := _META.match(line):
            name, _ = catalog.dcgm_shape(meta.group(2), shape)
            out.append(meta.group(1) + name + meta.group(3))
            continue
        sample = _SAMPLE.match(line)
        if sample is None:
            out.append(line)
            continue
        name, factor = catalog.dcgm_shape(sample.group(1), shape)
        labels = sample.group(2) or ""
        if shape != "4.8":
            labels = labels.replace(_DRIVER_OLD + "=", _DRIVER_NEW + "=")
        out.append(name + labels + sample.group(3) + _value(sample.group(4), factor) + sample.group(5))
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def reshape(samples: Iterable[promtext.Sample], shape: str) -> list[promtext.Sample]:
    """Parsed samples as `shape` writes them."""
    out = []
    for s in samples:
        name, factor = catalog.dcgm_shape(s.name, shape)
        labels = dict(s.labels)
        if shape != "4.8" and _DRIVER_OLD in labels:
            labels[_DRIVER_NEW] = labels.pop(_DRIVER_OLD)
        value = s.value if catalog.is_dcgm_blank(s.value) else s.value * factor
        out.append(promtext.Sample(name, labels, value))
    return out
