"""Tests here need an NVIDIA GPU with NVML; elsewhere they skip with the reason NVML gave."""

from __future__ import annotations

import pytest

from serving.hardware import detect


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    hardware = detect()
    for item in items:
        if "tests/gpu/" in str(item.fspath):
            item.add_marker(pytest.mark.gpu)
            if not hardware.has_gpu:
                item.add_marker(pytest.mark.skip(reason=f"no NVIDIA GPU: {hardware.reason}"))
