"""QoS priorities: short prompts and higher tiers first, ageing bounds every wait."""

from serving import qos
from serving.gateway_config import Qos

QOS = Qos()  # interactive <=512 (0 s), standard <=4096 (15 s), bulk (60 s)
BULK_DELAY_MS = QOS.classes[-1].delay_ms


def test_the_defaults_follow_the_seeds_scheduler_order():
    delays = [c.delay_ms for c in QOS.classes]
    assert delays == sorted(delays) and delays[0] == 0
    # seed 000: 10 s of lead per 1K prompt tokens, so a standard prompt outwaits a long queue
    assert QOS.classes[1].delay_ms >= 10_000


def test_prompt_length_picks_the_class():
    assert qos.classify(QOS, 100).name == "interactive"
    assert qos.classify(QOS, 512).name == "interactive"
    assert qos.classify(QOS, 513).name == "standard"
    assert qos.classify(QOS, 100_000).name == "bulk"


def test_a_short_request_arriving_later_goes_before_a_long_one():
    long = qos.assign(QOS, 6000, arrival_ms=0, tier_delay_ms=0)
    short = qos.assign(QOS, 100, arrival_ms=BULK_DELAY_MS - 1, tier_delay_ms=0)
    assert short.priority < long.priority  # vLLM serves the lower value first


def test_ageing_a_long_request_beats_short_ones_arriving_after_its_delay():
    long = qos.assign(QOS, 6000, arrival_ms=0, tier_delay_ms=0)
    short = qos.assign(QOS, 100, arrival_ms=BULK_DELAY_MS + 1, tier_delay_ms=0)
    assert long.priority < short.priority


def test_a_lower_tier_waits_its_tier_delay():
    gold = qos.assign(QOS, 100, arrival_ms=1000, tier_delay_ms=0)
    free = qos.assign(QOS, 100, arrival_ms=0, tier_delay_ms=5000)
    assert gold.priority < free.priority


def test_the_client_priority_shifts_by_steps_and_never_below_arrival():
    base = qos.assign(QOS, 100, arrival_ms=1000, tier_delay_ms=0)
    later = qos.assign(QOS, 100, arrival_ms=1000, tier_delay_ms=0, client_priority=2)
    assert later.priority - base.priority == 2 * QOS.client_priority_step_ms
    assert qos.assign(QOS, 100, arrival_ms=1000, tier_delay_ms=0, client_priority=-50).priority == 1000
