"""Admission decisions: types, clamps, context length, per-request cap, quota, QoS."""

import pytest

from serving.admission import AdmissionPolicy
from serving.errors import Rejection
from serving.gateway_config import GatewayConfig, Qos
from serving.quota import TenantQuotas
from serving.routes import Shape

CONFIG = GatewayConfig.model_validate(
    {
        "tiers": {
            "gold": {"max_tokens": 100, "max_request_tokens": 1000, "tokens_per_minute": 1500},
            "open": {},
        },
    }
)


def policy(qos: bool = True) -> AdmissionPolicy:
    return AdmissionPolicy(CONFIG, max_model_len=2048, served_names=["m"], qos_enabled=qos, quotas=TenantQuotas())


def rejected(call) -> Rejection:
    with pytest.raises(Rejection) as error:
        call()
    return error.value


def test_max_tokens_above_the_tier_clamp_is_clamped():
    admission = policy().admit(Shape.COMPLETIONS, {"max_tokens": 500}, "t", "gold", [10], 0)
    assert admission.max_tokens == 100 and admission.clamped_from == 500
    assert admission.body["max_tokens"] == 100


def test_missing_max_tokens_defaults_like_vllm():
    assert policy().admit(Shape.COMPLETIONS, {}, "t", "open", [10], 0).max_tokens == 16
    assert policy().admit(Shape.CHAT, {}, "t", "open", [10], 0).max_tokens == 2048 - 10
    assert policy().admit(Shape.CHAT, {}, "t", "gold", [10], 0).max_tokens == 100


def test_chat_max_completion_tokens_is_the_field_rewritten():
    admission = policy().admit(Shape.CHAT, {"max_completion_tokens": 7}, "t", "open", [10], 0)
    assert admission.body["max_completion_tokens"] == 7 and "max_tokens" not in admission.body


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"max_tokens": "5"}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"n": 0}, "n"),
        ({"priority": 1.5}, "priority"),
    ],
)
def test_wrong_types_and_values_are_400(body, param):
    error = rejected(lambda: policy().admit(Shape.COMPLETIONS, body, "t", "open", [10], 0))
    assert error.status == 400 and error.param == param


def test_prompt_filling_the_context_is_400_with_the_numbers():
    error = rejected(lambda: policy().admit(Shape.COMPLETIONS, {}, "t", "open", [2048], 0))
    assert error.status == 400 and error.reason == "context_length_exceeded"
    assert "2048 tokens" in error.message and "over by 1" in error.message


def test_prompt_plus_max_tokens_over_the_context_is_400_with_the_excess():
    error = rejected(lambda: policy().admit(Shape.COMPLETIONS, {"max_tokens": 100}, "t", "open", [2000], 0))
    assert "exceeds this model's max_model_len 2048 by 52" in error.message


def test_over_the_tier_cap_is_413_with_the_excess():
    error = rejected(lambda: policy().admit(Shape.COMPLETIONS, {"max_tokens": 100, "n": 2}, "t", "gold", [900], 0))
    assert error.status == 413 and "tier 'gold' allows 1000 per request: over by 100" in error.message


def test_over_quota_is_429_with_retry_after_and_the_shortfall():
    p = policy()
    p.admit(Shape.COMPLETIONS, {"max_tokens": 100}, "acme", "gold", [800], 0)
    p.admit(Shape.COMPLETIONS, {"max_tokens": 100}, "acme", "gold", [500], 0)
    error = rejected(lambda: p.admit(Shape.COMPLETIONS, {"max_tokens": 100}, "acme", "gold", [500], 0))
    assert error.status == 429 and error.reason == "quota_exhausted"
    assert "needs 600 tokens" in error.message and "short by" in error.message
    assert int(error.headers["retry-after"]) >= 1
    assert p.admit(Shape.COMPLETIONS, {"max_tokens": 100}, "other", "gold", [500], 0)  # per tenant


def test_qos_priority_is_written_into_the_request():
    admission = policy().admit(Shape.COMPLETIONS, {"max_tokens": 5}, "t", "open", [5000 // 4], 1234)
    standard = next(c for c in Qos().classes if c.name == "standard")
    assert admission.qos_class == "standard" and admission.body["priority"] == 1234 + standard.delay_ms


def test_without_priority_scheduling_the_client_priority_passes_untouched():
    admission = policy(qos=False).admit(Shape.COMPLETIONS, {"priority": 3}, "t", "open", [10], 0)
    assert admission.body["priority"] == 3 and admission.priority == 3


@pytest.mark.parametrize(
    ("body", "status"),
    [([1], 400), ({"model": 3}, 400), ({"model": "other"}, 404), ({"stream": "yes"}, 400)],
)
def test_request_shape_is_checked_first(body, status):
    assert rejected(lambda: policy().check_shape(body)).status == status
