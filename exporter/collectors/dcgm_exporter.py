"""An already-running dcgm-exporter, ingested: its series served as they are, except
DCGM's "blank" / "not supported" sentinels, which would read as real values.

Beside a local GPU backend (nvml, dcgm, emulated) the same DCGM_* series would be served twice,
once per source, with different label sets (hostname spellings, dcgm-exporter's
DCGM_FI_DRIVER_VERSION, pod labels): sums would double. So per GPU (UUID, and GPU_I_ID for a MIG
instance) and per measurement, whatever name it has there (4.9 serves the SM clock in Hz under
a name of its own where the local backend writes 4.8's in MHz), dcgm-exporter wins: it is the
DCGM reading the user deployed on purpose, with its Kubernetes pod mapping. The local backend
still serves, for those GPUs, the DCGM_* series dcgm-exporter does not (e.g. counters its CSV
leaves out) and every kvscope_* extra; when dcgm-exporter is down, the local backend serves
everything again on the next collection. `served()` is what the local collectors ask.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from exporter.collectors.vllm import metrics_url
from exporter.exposition import Series
from exporter.scrape import Target, scrape
from kvscope import catalog


def is_sentinel(value: float) -> bool:
    """DCGM's blank values (kvscope/catalog.py holds the one definition)."""
    return catalog.is_dcgm_blank(value)


class DcgmExporterCollector:
    name = "dcgm_exporter"

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        self.target = Target.of(metrics_url(url))
        self.url = self.target.url
        self.timeout = timeout
        self.parse_errors = 0
        self._served: dict[str, set[tuple[str, str]]] = {}

    def served(self) -> dict[str, set[tuple[str, str]]]:
        """Measurement (the catalog's name) -> (UUID, GPU_I_ID or "") of the devices its last
        collection served."""
        return self._served

    def collect(self) -> Iterable[Metric]:
        result = scrape(self.target, self.timeout)
        self.parse_errors += int(result.parse_error)
        up, errors = Series(catalog.TARGET_UP), Series(catalog.EXPORTER_PARSE_ERRORS)
        up.add((self.url,), 1.0 if result.up else 0.0)
        errors.add((self.url,), self.parse_errors)
        yield from (up.metric, errors.metric)
        if not result.up:
            self._served = {}
            raise RuntimeError(f"dcgm-exporter at {self.url}: {result.error}")
        served: dict[str, set[tuple[str, str]]] = {}
        for family in result.families:
            family.samples = [s for s in family.samples if not is_sentinel(s.value)]
            for sample in family.samples:
                uuid = sample.labels.get("UUID") or sample.labels.get("uuid")  # uuid: --use-old-namespace
                if uuid:  # per measurement, whatever its name (4.8's or 4.9's, in its unit)
                    served.setdefault(catalog.measurement_of(sample.name), set()).add(
                        (uuid, sample.labels.get("GPU_I_ID", ""))
                    )
            yield family
        self._served = served
