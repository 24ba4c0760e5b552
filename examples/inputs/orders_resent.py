"""Orders of which every tenth is sent twice: record ``i`` with ``i % 10 == 9`` is order
``i - 1`` again (same order id, customer, amount and currency; its own send time), as a
client that retried a send it thought had failed. Unique order ids otherwise, so a dedup
by order id has exactly one order to drop per re-send.

``pgval validate --job examples/jobs/orders_dedup.py:build
--input orders=examples/inputs/orders_resent.py:make``
"""

import random
from datetime import datetime, timezone

CURRENCIES = ("EUR", "EUR", "USD", "GBP")


def make(i, rng, event_ms):
    # The order's content comes from its number alone, so a re-send repeats it exactly;
    # pgval's own records have negative numbers and stay apart ("P-…").
    order = i - 1 if i % 10 == 9 else i
    content = random.Random(order)
    when = datetime.fromtimestamp(event_ms / 1000, timezone.utc)
    return {"order_id": f"M-{order}" if order >= 0 else f"P{order}",
            "customer": f"cust-{content.randrange(40):03d}",
            "amount": round(content.uniform(3, 250), 2),
            "currency": content.choice(CURRENCIES),
            "ts": when.isoformat(timespec="milliseconds").replace("+00:00", "Z")}
