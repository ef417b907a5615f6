"""Bundles: the evidence of one diagnosis (every measurement with the query that produced it),
saved with `--save-bundle` and diagnosed again, offline, with `--bundle`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from diagnosis.measures import Measurements, Value
from diagnosis.sources import SourceError

SCHEMA = "kvscope.bundle/v1"


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
    }
    path.write_text(json.dumps(data, indent=1, sort_keys=True))


def load(path: Path) -> Bundle:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise SourceError(f"cannot read bundle {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise SourceError(f"{path} is not a kvscope bundle (invalid JSON: {exc})") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise SourceError(f"{path} is not a kvscope bundle (expected schema {SCHEMA})")
    try:
        measurements = Measurements(
            values={
                name: [Value(float(v["value"]), dict(v["labels"]), str(v["query"])) for v in values]
                for name, values in data["measurements"].items()
            },
            errors=dict(data.get("errors", {})),
        )
        return Bundle(float(data["at"]), float(data["window"]), str(data["source"]), measurements)
    except (KeyError, TypeError, ValueError) as exc:
        raise SourceError(f"{path} is a damaged kvscope bundle: {exc}") from exc
