"""One validate run with wall-clock timers around the steps outside the named timings."""
import sys, time, functools, json
import pgval.run.experiment as ex
import pgval.run.timeline as tl
import pgval.run.finalize as fin

log = []
def timed(owner, name, label=None):
    f = getattr(owner, name)
    @functools.wraps(f)
    def g(*a, **k):
        t = time.monotonic()
        try:
            return f(*a, **k)
        finally:
            log.append((label or name, round(time.monotonic() - t, 3), round(time.monotonic(), 3)))
    setattr(owner, name, g)

timed(ex, 'start_guard'); timed(ex, 'preflight'); timed(ex, 'setup_run'); timed(ex, 'collect')
timed(ex, 'dump_class_archives'); timed(ex, 'teardown'); timed(ex, 'build_manifest'); timed(ex, 'judge')
timed(ex, 'write_evidence'); timed(ex, 'store_result')
timed(tl.Timeline, 'prime'); timed(tl.Timeline, '_start_generators'); timed(tl.Timeline, 'warm_up')
timed(tl.Timeline, 'follow'); timed(tl.Timeline, 'judge_bounds'); timed(tl.Timeline, 'close_and_drain')
timed(fin, 'read_back')
if __name__ == '__main__':
    from pgval.cli.app import main
    t0 = time.monotonic()
    try:
        main(sys.argv[1:], standalone_mode=False)
    finally:
        print('---', file=sys.stderr)
        for name, dt, at in log:
            print(f'{at - t0:8.2f} {dt:8.3f} {name}', file=sys.stderr)
