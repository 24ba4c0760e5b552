"""The warm-up rule (pgval/run/warmup.py) on hand-built latency sequences: when is a pipeline
steady, and what a run keeps when it never is."""

from __future__ import annotations

import numpy as np
import pytest

from pgval.run.warmup import WarmUp, after_run, direction, holds, is_steady, trend, window_medians

#: Per-window medians (s) by window end after T1, default cluster, 40 s phases: the lead's
#: SST probe, and pgval's MST run of this change (a cold plateau, then a fall).
SST = [11.7, 6.7, 5.1, 4.6, 4.75, 3.5, 3.47, 3.5, 3.4, 3.4, 3.4, 4.4]
MST = [32.6, 32.9, 30.1, 20.1, 16.5, 18.2, 17.8, 12.2, 14.0, 14.9, 12.7, 10.4]


def settles_at(medians: list[float] | np.ndarray) -> int | None:
    """The window at which a run seeing these windows one by one would start control."""
    return next((k for k in range(len(medians) + 1) if is_steady(medians[:k + 1])), None)


def test_a_window_holds_unless_it_fell_below_or_rose_above_both_before_it() -> None:
    assert holds([10.0, 8.0, 6.9, 5.5, 7.0]).tolist() == [True, False, True]
    #             6.9 >= 0.85 x 8.0; 5.5 < 0.85 x 6.9; 7.0 >= 0.85 x 5.5 (the smaller before)
    #             and 7.0 <= 1.15 x 6.9 (the larger before)
    assert holds([4.0, 4.4, 5.0, 5.0]).tolist() == [True, True]  # 5.0 <= 1.15 x 4.4
    assert holds([4.0, 4.0, 4.7]).tolist() == [False]            # 4.7 > 1.15 x 4.0: a rise
    assert holds([1.0, 2.0]).tolist() == []


def test_the_trend_is_the_least_squares_change_over_the_latest_four_windows() -> None:
    assert trend([35.4, 32.4, 29.4, 26.4]) == pytest.approx(-9.0 / 30.9)
    assert trend([1.0, 5.0, 8.0, 12.0, 20.0]) == pytest.approx(14.7 / 11.25)  # the last 4
    assert trend([4.0, 4.0, 4.0]) is None


@pytest.mark.parametrize("medians,expected", [
    (SST, 8),                                  # falling, a plateau at 4.6-4.75, falling again
    (MST, 6),                                  # a flat cold plateau is not enough alone
    ([10.0, 8.0, 6.0, 4.5, 3.3, 2.4, 1.8], None),  # falls by > 15 % every window: never
    ([4.0, 4.0, 4.0], None),                   # too few windows to judge twice
    ([], None),
    ([4.0, 4.1, 3.9, 4.0], 3),                 # flat from the start: as soon as allowed
    ([3.4, 4.4, 3.4, 3.5, 3.4], 3),            # one high outlier before is not a fall
    ([9.0, 5.0, 4.8, 4.9, 4.85], 4),           # a fall of 4 % is noise, once 9.0 is past
    # A backlog draining 3 s a window: each step under the band, −29 % over four windows.
    ([35.4, 32.4, 29.4, 26.4, 23.4, 20.4], None),
    ([5.0, 5.0, 8.0, 12.0, 20.0], None),       # rising: the pipeline falls behind
    ([10.0, 11.0, 12.1, 13.3, 14.6, 16.1], None),  # rising 10 % a window: a trend
])
def test_steady_once_the_latest_two_windows_hold_and_no_trend(medians: list[float],
                                                              expected: int | None) -> None:
    assert settles_at(medians) == expected


def test_the_draining_backlog_seen_on_the_cluster_is_falling_not_steady() -> None:
    """A user's job with 3 s windows at 2,000 ev/s: 35.4, 32.4, 29.4, 26.4 s. Each window
    holds (≥ 0.85 × the smaller before it), which alone once called it steady."""
    seen = [40.0, 38.4, 35.4, 32.4, 29.4, 26.4]
    assert holds(seen)[-2:].all()
    assert not is_steady(seen) and direction(seen) == "falling"


def test_a_rising_latency_says_the_pipeline_does_not_keep_up() -> None:
    t1 = 5_000_000
    warm = WarmUp(t1)
    ends, ingress = _windows(t1, [5.0, 5.0, 8.0, 12.0, 20.0])
    warm.add(ends, ingress, watermark=t1 + 10**9)
    assert warm.note() == "window 5, latency 20.0 s, rising"
    kept = warm.record(started_ms=t1 + 30_000, max_seconds=30)
    assert not kept["settled"]
    assert kept["why"].startswith("latency was still rising within --warmup-max-seconds 30")
    assert "does not keep up with the input rate" in kept["why"]
    assert "pgval oir" in kept["why"] and "--job" in kept["why"]


def test_after_the_run_a_control_slower_than_recovery_was_never_steady() -> None:
    """A flat cold plateau passes the live rule; the finished run's ratio check says control
    was not steady, and the warm-up record says it never settled, with why."""
    t1 = 5_000_000
    warm = WarmUp(t1)
    ends, ingress = _windows(t1, [30.0, 30.5, 29.8, 30.1])
    warm.add(ends, ingress, watermark=t1 + 10**9)
    kept = warm.record(started_ms=t1 + 40_000, max_seconds=180)
    assert kept["settled"]
    why = "control's latency p50 29.0 s is 2.9× recovery's 10.0 s (more than 1.5×): …"
    later = after_run(kept, why)
    assert later["settled"] is False and later["why"] == why
    assert later["rule_steady_window_end"] == kept["steady_window_end"]
    assert "steady_window_end" not in later and kept["settled"]  # the original is kept
    assert after_run(kept, None) == kept and after_run({}, why) == {}
    never = {"settled": False, "why": "latency was still falling …"}
    assert after_run(never, why)["why"] == f"latency was still falling …; {why}"


def test_a_steady_window_followed_by_a_fall_is_not_steady() -> None:
    """Windows close together in one slow batch: what counts is the latest."""
    assert is_steady(MST[:3] + [30.0]) and not is_steady(MST[:4])


def test_noise_around_a_level_settles_as_soon_as_allowed() -> None:
    """±5 % noise around a flat level: steady at the fourth window whatever the draw, while
    the same noise on a series that halves every window never is."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        noise = 1 + rng.uniform(-0.05, 0.05, 10)
        assert settles_at(4.0 * noise) == 3
        assert settles_at(40.0 * 0.5 ** np.arange(10) * noise) is None


def test_window_medians_per_window_end() -> None:
    ends = np.array([20, 10, 10, 10, 20, 30])
    ingress = np.array([25, 13, 11, 18, 23, 40])
    got_ends, medians, counts = window_medians(ends, ingress)
    assert got_ends.tolist() == [10, 20, 30]
    assert medians.tolist() == [3.0, 4.0, 10.0]  # [1, 3, 8] → 3; [3, 5] → 4; [10]
    assert counts.tolist() == [3, 2, 1]


def _windows(t1: int, medians_s: list[float], step: int = 10_000) -> tuple[np.ndarray, np.ndarray]:
    ends = t1 + step * np.arange(1, len(medians_s) + 1)
    return ends, ends + (np.array(medians_s) * 1000).astype(np.int64)


def test_only_closed_windows_after_t1_are_judged() -> None:
    t1 = 1_000_000
    warm = WarmUp(t1)
    ends, ingress = _windows(t1, [11.7, 4.9, 4.7, 4.6, 4.75])
    priming = np.array([t1 - 50_000, t1])  # old windows: pgval's priming events only
    warm.add(np.r_[priming, ends], np.r_[priming + 99_000, ingress], watermark=int(ends[3]))
    assert warm.closed()[0].tolist() == ends[:4].tolist()  # the 5th is not closed yet
    assert not warm.steady() and warm.note() == "window 4, latency 4.6 s, falling"
    warm.add(np.zeros(0, np.int64), np.zeros(0, np.int64), watermark=int(ends[4]))
    assert warm.steady() and warm.note().endswith("steady")
    kept = warm.record(started_ms=t1 + 51_000, max_seconds=180)
    assert kept["settled"] and kept["seconds"] == 51.0
    assert kept["steady_window_end"] == int(ends[4])
    assert [w["median_ms"] for w in kept["windows"]] == [11700, 4900, 4700, 4600, 4750]


@pytest.mark.parametrize("medians,why", [
    ([], "no window's outputs came within --warmup-max-seconds 30"),
    ([9.0, 6.0, 5.8], "only 3 window(s) with outputs closed within --warmup-max-seconds 30"),
    ([20.0, 12.0, 8.0, 5.0], "latency was still falling within --warmup-max-seconds 30 "
                             "(last window medians 20.0, 12.0, 8.0, 5.0 s)"),
])
def test_a_warm_up_that_never_settles_says_why(medians: list[float], why: str) -> None:
    t1 = 5_000_000
    warm = WarmUp(t1)
    ends, ingress = _windows(t1, medians)
    warm.add(ends, ingress, watermark=t1 + 10**9)
    kept = warm.record(started_ms=t1 + 30_000, max_seconds=30)
    assert not kept["settled"] and "steady_window_end" not in kept
    assert kept["why"].startswith(why), kept["why"]


def test_a_job_whose_outputs_carry_no_window_says_so() -> None:
    warm = WarmUp(t1=1_000)
    warm.untimed = 250
    rec = warm.record(started_ms=6_000, max_seconds=180)
    assert rec["settled"] is False and rec["seconds"] == 5.0
    assert rec["why"] == ("the job's outputs carry no window_end (250 read), so the rule had "
                          "no window to time: control started after --warmup-seconds")


@pytest.mark.parametrize(("value", "ms"), [
    (1_700_000_010_000, 1_700_000_010_000),
    ("2023-11-14T22:13:30.000Z", 1_700_000_010_000),   # Spark's to_json of a timestamp
    ("2023-11-14T22:13:30.000+00:00", 1_700_000_010_000),
    ("2023-11-14T22:13:30", 1_700_000_010_000),         # no zone: UTC, the driver's
    ("yesterday", None), (True, None), (None, None), (1.5, None), ([1], None)])
def test_an_outputs_window_end_as_sst_or_a_job_writes_it(value: object, ms: int | None) -> None:
    from pgval.run.monitor import window_end_ms

    assert window_end_ms(value) == ms


def test_a_query_has_a_watermark_when_spark_reports_one() -> None:
    from pgval.run.monitor import has_watermark

    assert not has_watermark([])
    assert not has_watermark([{"eventTime": {}}, {"batchId": 1}])  # a stateless job
    assert has_watermark([{"eventTime": {}}, {"eventTime": {
        "watermark": "1970-01-01T00:00:00.000Z"}}])
