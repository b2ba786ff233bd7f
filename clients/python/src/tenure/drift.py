"""Clock-rate drift, and DESIGN.md rule 4's holder margin: a port of the Rust
``tenure_core::drift`` (one formula for the whole product, integer arithmetic, no floating
point inside it).

Rule 4: a holder treats its leadership as valid only until ``send time of its last
acknowledged keepalive + TTL - margin`` on its own monotonic clock, while the cluster never
expires the session before ``receive time + TTL`` on its own. If the two clocks' rates differ
by less than the drift bound ``d``, then over a TTL they disagree by less than ``d x TTL``
each way; the margin takes twice that (either clock may be the fast one) plus a fixed
allowance for the holder's own scheduling.
"""

from __future__ import annotations

#: The documented default bound on clock-rate drift, in parts per million: 1 %.
DEFAULT_DRIFT_PPM = 10_000
#: The most the product accepts: 10 %. Beyond that a lease is not a useful promise.
MAX_DRIFT_PPM = 100_000
#: The fixed part the client library adds for its own scheduling: 10 ms, in microseconds.
CLIENT_SCHEDULING_ALLOWANCE_US = 10_000

_U64_MAX = (1 << 64) - 1


def skew_over_us(micros: int, drift_ppm: int) -> int:
    """How far two clocks with this bound can move apart over ``micros`` of one of them,
    rounded up: ``ceil(micros x ppm / 10**6)`` (saturating at ``u64::MAX``, as in Rust)."""
    if micros < 0 or drift_ppm < 0:
        raise ValueError("durations and drift bounds are never negative")
    return min(-(-(micros * drift_ppm) // 1_000_000), _U64_MAX)


def holder_margin_us(ttl_us: int, drift_ppm: int, fixed_us: int) -> int:
    """The holder's margin of rule 4 in microseconds: ``2 x ceil(ttl x drift) + fixed``
    (saturating)."""
    return min(skew_over_us(ttl_us, drift_ppm) * 2 + fixed_us, _U64_MAX)


def holder_margin_ms(
    ttl_ms: int,
    drift_ppm: int = DEFAULT_DRIFT_PPM,
    fixed_us: int = CLIENT_SCHEDULING_ALLOWANCE_US,
) -> float:
    """:func:`holder_margin_us` of a TTL in whole milliseconds, as milliseconds."""
    return holder_margin_us(ttl_ms * 1_000, drift_ppm, fixed_us) / 1_000
