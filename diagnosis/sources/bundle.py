"""Bundles: the evidence of one diagnosis (every measurement with the query that produced it),
saved with `--save-bundle` and diagnosed again, offline, with `--bundle`."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diagnosis.measures import Measurements, Value
from diagnosis.sources import SourceError

SCHEMA = "kvscope.bundle/v1"
MAX_BUNDLE_BYTES = 256 << 20  # a bundle of a large fleet is a few MB


@dataclass
class Bundle:
    at: float
    window: float
    source: str
    measurements: Measurements


def save(path: Path, bundle: Bundle) -> None:
    data = {
        "schema": SCHEMA,
        "at": bundle.at,
        "window": bundle.window,
        "source": bundle.source,
        "measurements": {
            name: [{"value": v.value, "labels": v.labels, "query": v.query} for v in values]
            for name, values in bundle.measurements.values.items()
        },
        "errors": bundle.measurements.errors,
        "baseline": {
            name: [{"value": v.value, "labels": v.labels, "query": v.query} for v in values]
            for name, values in bundle.measurements.baseline.items()
        },
        "notes": bundle.measurements.notes,
        "sources": bundle.measurements.sources,
        "onsets": _times(bundle.measurements.onsets),
        "ended": _times(bundle.measurements.ended),
        **({"spans": list(bundle.measurements.spans)} if bundle.measurements.spans else {}),
    }
    path.write_text(json.dumps(data, indent=1, sort_keys=True))


Times = dict[tuple[str, tuple[str, ...]], float]  # (incident id, its scopes) -> unix seconds


def _times(times: Times) -> list[dict[str, Any]]:
    return [{"id": key[0], "scopes": list(key[1]), "at": at} for key, at in times.items()]


def _keyed(rows: list[dict[str, Any]]) -> Times:
    return {(str(o["id"]), tuple(str(x) for x in o["scopes"])): float(o["at"]) for o in rows}


def load(path: Path) -> Bundle:
    """A saved bundle; SourceError (one line naming the file) for anything else."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_BUNDLE_BYTES + 1)
    except OSError as exc:
        raise SourceError(f"cannot read bundle {path}: {exc.strerror}") from exc
    if len(raw) > MAX_BUNDLE_BYTES:
        raise SourceError(f"{path} is over {MAX_BUNDLE_BYTES:,} bytes: not a kvscope bundle")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise SourceError(f"{path} is not a kvscope bundle (not UTF-8 text: {exc.reason})") from exc
    except json.JSONDecodeError as exc:
        raise SourceError(f"{path} is not a kvscope bundle (invalid JSON, {exc.msg} at line {exc.lineno})") from exc
    except RecursionError:
        raise SourceError(f"{path} is not a kvscope bundle (nested too deep)") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise SourceError(f"{path} is not a kvscope bundle (expected schema {SCHEMA})")
    try:
        measurements = Measurements(
            values={
                name: [Value(float(v["value"]), dict(v["labels"]), str(v["query"])) for v in values]
                for name, values in data["measurements"].items()
            },
            errors=dict(data.get("errors", {})),
            baseline={
                name: [Value(float(v["value"]), dict(v["labels"]), str(v["query"])) for v in values]
                for name, values in data.get("baseline", {}).items()
            },
            notes=[str(n) for n in data.get("notes", [])],
            sources=[{str(k): str(v) for k, v in s.items()} for s in data.get("sources", [])],
            onsets=_keyed(data.get("onsets", [])),
            ended=_keyed(data.get("ended", [])),
            spans=_spans(data.get("spans")),
        )
        at, window = float(data["at"]), float(data["window"])
        if not (math.isfinite(at) and math.isfinite(window) and window > 0):
            raise ValueError(f"at {at} and window {window} must be finite, the window positive")
        return Bundle(at, window, str(data["source"]), measurements)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SourceError(f"{path} is a damaged kvscope bundle ({type(exc).__name__}: {exc})") from exc


def _spans(raw: object) -> tuple[float, float] | None:
    """The window's and the baseline's seconds, where the bundle says (both finite, positive)."""
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) != 2:
        raise ValueError(f"spans {raw!r} must be [window seconds, baseline seconds]")
    window, baseline = float(raw[0]), float(raw[1])
    if not all(math.isfinite(x) and x > 0 for x in (window, baseline)):
        raise ValueError(f"spans {raw} must be two finite positive numbers of seconds")
    return window, baseline
