"""Token buckets: per-minute budgets with refill and refunds."""

import math

from serving.quota import TenantQuotas, TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_full_bucket_gives_its_minute_and_no_more():
    clock = Clock()
    bucket = TokenBucket(600, clock)
    assert bucket.try_take(500)
    assert not bucket.try_take(101)
    assert bucket.try_take(100)
    assert bucket.available() == 0


def test_refill_is_continuous_and_capped():
    clock = Clock()
    bucket = TokenBucket(600, clock)  # 10 tokens per second
    bucket.try_take(600)
    clock.now = 3.0
    assert bucket.available() == 30
    clock.now = 3600.0
    assert bucket.available() == 600


def test_refund_returns_unused_tokens_up_to_the_cap():
    clock = Clock()
    bucket = TokenBucket(100, clock)
    bucket.try_take(80)
    bucket.refund(50)
    assert bucket.available() == 70
    bucket.refund(1000)
    assert bucket.available() == 100


def test_seconds_until_tells_the_retry_after():
    clock = Clock()
    bucket = TokenBucket(60, clock)  # one per second
    bucket.try_take(60)
    assert bucket.seconds_until(10) == 10
    assert math.isinf(bucket.seconds_until(61))


def test_each_tenant_has_its_own_bucket():
    quotas = TenantQuotas(Clock())
    quotas.bucket("a", 100).try_take(100)
    assert quotas.bucket("b", 100).available() == 100
    assert quotas.bucket("a", 100).available() == 0


def test_a_charge_takes_only_what_the_bucket_holds():
    clock = Clock()
    bucket = TokenBucket(100, clock)
    bucket.try_take(90)
    bucket.charge(50)
    assert bucket.available() == 0
