"""Admission: the gateway's decision on one parsed request, before the engine sees it.

Pure over its inputs (body, tenant, token counts, clock): checks types, clamps max_tokens
to the tier, refuses what cannot fit max_model_len or the tier's per-request cap, takes the
tokens from the tenant's bucket, and assigns the QoS priority. Each refusal is a Rejection
with the status, the limit and by how much the request is over it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from serving import qos
from serving.bodies import bounded_fields, int_field
from serving.errors import Rejection
from serving.gateway_config import GatewayConfig, Tier
from serving.pooling_prompts import POOLING_SHAPES, output_per_prompt
from serving.quota import Taken, TenantQuotas, over_a_minute, refusal, take_both
from serving.routes import Shape

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # vLLM's and OpenAI's default for /v1/completions
CHAT_LIKE = (Shape.CHAT, Shape.CHAT_BATCH, Shape.RESPONSES, Shape.MESSAGES)


def budget_field(shape: Shape, body: dict[str, Any]) -> str:
    """The field that caps a request's output tokens, as the shape's API spells it."""
    if shape is Shape.RESPONSES:
        return "max_output_tokens"
    if shape in (Shape.CHAT, Shape.CHAT_BATCH) and body.get("max_completion_tokens") is not None:
        return "max_completion_tokens"
    return "max_tokens"


@dataclass(frozen=True)
class Admission:
    body: dict[str, Any]  # rewritten: max_tokens set, priority assigned
    prompt_tokens: tuple[int, ...]
    max_tokens: int
    n: int
    reserved_tokens: int  # taken from the tenant's bucket: prompts + max_tokens x n x prompts
    qos_class: str
    priority: int
    clamped_from: int | None  # the client's max_tokens when the tier clamped it


class AdmissionPolicy:
    def __init__(
        self,
        config: GatewayConfig,
        *,
        max_model_len: int,
        served_names: Sequence[str],
        qos_enabled: bool,
        quotas: TenantQuotas,
        request_quotas: TenantQuotas | None = None,
    ) -> None:
        self.config = config
        self.max_model_len = max_model_len
        self.served_names = tuple(served_names)
        self.qos_enabled = qos_enabled
        self.quotas = quotas
        self.request_quotas = request_quotas or TenantQuotas()

    def check_shape(self, body: object) -> dict[str, Any]:
        """The body must be a JSON object naming a served model (or none)."""
        if not isinstance(body, dict):
            raise Rejection(400, "invalid_request", "the request body must be a JSON object")
        model = body.get("model")
        if model is not None and not isinstance(model, str):
            raise Rejection(400, "invalid_request", "'model' must be a string", "model")
        if model is not None and model not in self.served_names:
            raise Rejection(404, "model_not_found", f"The model `{model}` does not exist.", "model")
        if "stream" in body and not isinstance(body["stream"], bool | None):
            raise Rejection(400, "invalid_request", "'stream' must be a boolean", "stream")
        return body

    def admit(
        self,
        shape: Shape,
        body: dict[str, Any],
        tenant: str,
        tier_name: str,
        prompt_tokens: Sequence[int],
        arrival_ms: int,
    ) -> Admission:
        tier = self.config.tiers[tier_name]
        longest = max(prompt_tokens)
        if shape in POOLING_SHAPES:  # no output budget to clamp: each prompt yields 0 or 1 token
            n, clamped_from = 1, None
            client_priority = int_field(body, "priority", 0, tier.max_client_priority) or 0
            max_tokens = output_per_prompt(shape)
            self._fits(longest + max_tokens, longest, "prompt")
            rewritten = dict(body)
        else:
            n = bounded_fields(body, tier, chat=shape in CHAT_LIKE)
            client_priority = int_field(body, "priority", 0, tier.max_client_priority) or 0
            key = budget_field(shape, body)
            requested = int_field(body, key, 1)
            max_tokens, clamped_from = self._max_tokens(shape, requested, key, tier, longest)
            rewritten = {**body, key: max_tokens}
        reserved = sum(prompt_tokens) + max_tokens * n * len(prompt_tokens)
        self._check_request_cap(tier_name, tier, prompt_tokens, max_tokens, n, reserved)
        self._take_quota(tenant, tier_name, tier, reserved)
        if self.qos_enabled:
            assignment = qos.assign(self.config.qos, longest, arrival_ms, tier.priority_delay_ms, client_priority)
            rewritten["priority"] = assignment.priority
            qos_class, priority = assignment.qos_class, assignment.priority
        else:
            qos_class, priority = qos.classify(self.config.qos, longest).name, client_priority
        if shape is Shape.MESSAGES:  # Anthropic's Messages API has no priority field to carry it
            rewritten.pop("priority", None)
        return Admission(
            rewritten,
            tuple(prompt_tokens),
            max_tokens,
            n,
            reserved,
            qos_class,
            priority,
            clamped_from,
        )

    def _fits(self, total: int, longest: int, param: str) -> None:
        """A pooling prompt (and its scoring token) within max_model_len."""
        if total > self.max_model_len:
            raise Rejection(
                400,
                "context_length_exceeded",
                f"the prompt is {longest} tokens; this model's max_model_len is {self.max_model_len}, "
                f"so it is over by {total - self.max_model_len}",
                param,
            )

    def _max_tokens(
        self, shape: Shape, requested: int | None, key: str, tier: Tier, longest: int
    ) -> tuple[int, int | None]:
        room = self.max_model_len - longest
        if room <= 0:
            raise Rejection(
                400,
                "context_length_exceeded",
                f"the prompt is {longest} tokens; this model's max_model_len is "
                f"{self.max_model_len}, so it is over by {longest - self.max_model_len + 1} "
                "(at least one token must be left to generate)",
                "prompt",
            )
        clamp = tier.max_tokens or math.inf
        if requested is None:
            default = COMPLETIONS_DEFAULT_MAX_TOKENS if shape is Shape.COMPLETIONS else room
            return int(min(default, clamp, room)), None
        if requested > clamp:
            requested, clamped_from = int(clamp), requested
        else:
            clamped_from = None
        if longest + requested > self.max_model_len:
            raise Rejection(
                400,
                "context_length_exceeded",
                f"prompt {longest} + {key} {requested} = {longest + requested} tokens exceeds "
                f"this model's max_model_len {self.max_model_len} by "
                f"{longest + requested - self.max_model_len}",
                key,
            )
        return requested, clamped_from

    def _check_request_cap(
        self,
        tier_name: str,
        tier: Tier,
        prompts: Sequence[int],
        max_tokens: int,
        n: int,
        total: int,
    ) -> None:
        cap = tier.max_request_tokens
        if cap is not None and total > cap:
            raise Rejection(
                413,
                "request_too_large",
                f"the request needs {total} tokens (prompt {sum(prompts)} + max_tokens "
                f"{max_tokens} x n {n} x {len(prompts)} prompt(s)); tier '{tier_name}' allows "
                f"{cap} per request: over by {total - cap}",
            )

    def _take_quota(self, tenant: str, tier_name: str, tier: Tier, tokens: int) -> None:
        if tier.tokens_per_minute is not None and (too_big := over_a_minute(tenant, tier.tokens_per_minute, tokens)):
            raise too_big
        if self.config.quota_backend is not None:  # shared buckets: the gateway reserves (serving/quota_redis.py)
            return
        requests = tier.requests_per_minute
        budget = tier.tokens_per_minute
        taken = take_both(
            None if requests is None else self.request_quotas.bucket(tenant, requests),
            None if budget is None else self.quotas.bucket(tenant, budget),
            tokens,
        )
        if taken.refused is not None:  # headers read for a refusal only: an admitted request's come with its answer
            refused = refusal(tenant, tokens, taken, self.rate_headers(tenant, tier_name))
            assert refused is not None
            raise refused

    def rate_headers(self, tenant: str, tier_name: str) -> dict[str, str]:
        """OpenAI's x-ratelimit-* headers for the tenant's buckets (tokens, requests)."""
        tier = self.config.tiers[tier_name]
        tokens = self.quotas.get(tenant) if tier.tokens_per_minute is not None else None
        requests = self.request_quotas.get(tenant) if tier.requests_per_minute is not None else None
        return Taken(
            None if requests is None else requests.answer(), None if tokens is None else tokens.answer()
        ).headers()
