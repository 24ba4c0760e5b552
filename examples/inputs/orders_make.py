"""Orders made by a function: record ``i`` from a seeded ``rng`` at ``event_ms``.

``pgval validate --job examples/jobs/orders.py:build
--input orders=examples/inputs/orders_make.py:make``
"""

from datetime import datetime, timezone

CURRENCIES = ("EUR", "EUR", "USD", "GBP")


def make(i, rng, event_ms):
    when = datetime.fromtimestamp(event_ms / 1000, timezone.utc)
    return {"order_id": f"M-{i}", "customer": f"cust-{rng.randrange(40):03d}",
            "amount": round(rng.uniform(3, 250), 2), "currency": rng.choice(CURRENCIES),
            "ts": when.isoformat(timespec="milliseconds").replace("+00:00", "Z")}
