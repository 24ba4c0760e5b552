"""Write the orders sample as an Avro object container file with the shop's schema: how a
JSON-lines sample becomes an Avro one (``python examples/inputs/orders_to_avro.py``).

The amount becomes a decimal, the event time an Avro timestamp, and every fifth order
carries a coupon (a union with null). pgval replays the file as it is
(``--replay orders=examples/inputs/orders.avro``): the file carries its schema.
"""

import json
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import fastavro

HERE = Path(__file__).resolve().parent


def main() -> None:
    schema = fastavro.parse_schema(json.loads((HERE / "orders.avsc").read_text()))
    records = []
    for n, line in enumerate((HERE / "orders.jsonl").read_text().splitlines()):
        order = json.loads(line)
        order["amount"] = Decimal(str(order["amount"])).quantize(Decimal("0.01"))
        order["ts"] = datetime.fromisoformat(order["ts"].replace("Z", "+00:00"))
        order["coupon"] = f"SAVE{n % 3 + 1}0" if n % 5 == 0 else None
        records.append(order)
    with (HERE / "orders.avro").open("wb") as out:
        fastavro.writer(out, schema, records, codec="null", sync_marker=b"pgval-orders-avr")


if __name__ == "__main__":
    main()
