"""Metamorphic: every case of the library and both reality splits, also in other shapes
(tests/scenarios/transforms.py: more healthy nodes, the other host label, the instance
relabelled as the pod, an unrelated healthy model, a 15 s or 60 s scrape step, a 30-minute
window), backfilled into one real Prometheus. The verdict and the active incidents with their
scopes must be the same as the case's own. CI runs two transforms per case, rotating so that
each transform meets a share of the cases; `python -m bench.metamorphic` runs them all."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.scenarios.transforms import fleets, variants
from tests.scenarios.verdicts import store, verdict

pytestmark = pytest.mark.integration
VARIANTS = list(variants(per_case=2))


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory) -> Iterator[tuple[str, float]]:
    originals = [f for f, _ in fleets()]
    with store(tmp_path_factory.mktemp("metamorphic"), [*originals, *(v for _, _, v in VARIANTS)]) as served:
        yield served


@pytest.mark.parametrize(("transform", "original", "shaped"), VARIANTS, ids=lambda v: getattr(v, "name", v))
def test_a_shape_changes_nothing(prometheus, transform, original, shaped):
    assert verdict(*prometheus, shaped) == verdict(*prometheus, original), transform


def test_every_transform_meets_cases_of_every_source():
    met = {t for t, _, _ in VARIANTS}
    assert len(met) >= 7 and len(VARIANTS) >= 2 * len(fleets()) - 10
