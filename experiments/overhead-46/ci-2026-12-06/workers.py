import re, sys, collections
log = open(sys.argv[1]).read().splitlines()
worker = {}
order = collections.defaultdict(list)
for l in log:
    m = re.match(r"\[(gw\d)\] \[\s*\d+%\] (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS) (\S+)", l)
    if m:
        worker[m.group(3)] = m.group(1); order[m.group(1)].append(m.group(3))
dur = collections.defaultdict(float)
for l in log:
    m = re.match(r"^([0-9.]+)s (call|setup|teardown)\s+(\S+)", l)
    if m: dur[m.group(3)] += float(m.group(1))
busy = collections.defaultdict(float)
for t, w in worker.items(): busy[w] += dur.get(t, 0)
for w in sorted(busy): print(w, "busy %.1f min" % (busy[w]/60), "tests", len(order[w]))
mods = collections.defaultdict(lambda: [None, 0.0])
for w in sorted(order):
    seen = []
    for t in order[w]:
        m = t.split("::")[0]
        if not seen or seen[-1][0] != m: seen.append([m, 0.0])
        seen[-1][1] += dur.get(t, 0)
    print(w, " -> ".join(f"{m.split('/')[-1]}({s:.0f})" for m, s in seen))
