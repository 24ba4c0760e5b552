"""Each cell's figures of the four matrices kept here (their results databases):
python3 experiments/overhead-46/matrix-c1-2026-12-06/cells.py"""

import json
import sqlite3
from pathlib import Path

HERE = Path(__file__).parent
for name in ("default", "c1", "default-2", "c1-2"):
    print(f"== {name}")
    db = sqlite3.connect(HERE / name / "ci.db")
    db.row_factory = sqlite3.Row
    for r in db.execute("SELECT * FROM runs ORDER BY id"):
        s = json.loads(r["summary"])
        t, d = s.get("timings", {}), s.get("driver") or {}
        p50 = (s.get("latency") or {}).get("control", {}).get("p50_s")
        print(f"{r['pg']} {r['fault']:12s} {s.get('guarantee')} valid={s.get('valid')} "
              f"total {t.get('total_s', 0):6.1f} own {t.get('overhead_s') or 0:5.1f} "
              f"warm-up {t.get('warmup_s') or 0:5.1f} oracle {t.get('job_oracle_s') or 0:5.1f} "
              f"driver {t.get('driver_start_s') or 0:5.1f} priming {t.get('prime_s') or 0:5.1f} "
              f"drain {t.get('drain_s') or 0:4.1f} control p50 {p50} "
              f"driver {d.get('mode')}/{d.get('cell', '')} "
              f"{s.get('machine', {}).get('jvm_options')}")
