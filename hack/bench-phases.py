#!/usr/bin/env python3
"""Per-phase timeline of a scheduler bench run, from the scheduler's log.

Usage: BENCH_LOG=/tmp/s.log BENCH_RUST_LOG=info,slurm_bridge=trace \
         cargo bench -p slurm-bridge --bench scheduler -- --mode burst --pods 1000
       hack/bench-phases.py /tmp/s.log
Prints when each phase happened (seconds from the first log line), per job the latencies
submit -> labelled -> allocation seen -> bound, and per-second counts of submits, allocations
seen and binds.

With a second argument, the arrival mode's BENCH_TIMES file (each pod's create answered and its
binding seen, Unix seconds), also per pod: created -> its watch event in the scheduler ->
queued -> handed to the controller -> first pass -> submitted, and per-second counts of
creates, watch events and first passes.
"""
import re, sys, datetime, collections, statistics
t0 = None
ev = collections.defaultdict(list)  # name -> [(t, fields)]
pat = re.compile(r'^(\S+)\s+(\w+)\s+(.*)$')
podpat = re.compile(r'pod=([^\s}:,]+)')
first = collections.defaultdict(dict)  # phase -> pod -> first absolute time
for line in open(sys.argv[1], errors='replace'):
    line = re.sub(r'\x1b\[[0-9;]*m', '', line)
    m = pat.match(line)
    if not m: continue
    try:
        t = datetime.datetime.fromisoformat(m.group(1).replace('Z', '+00:00')).timestamp()
    except ValueError:
        continue
    if t0 is None: t0 = t
    rest = m.group(3)
    pm = podpat.search(rest)
    if pm:
        for name in ['pod watch event', 'new pod queued', 'pod handed out', 'pass started', 'submitted external job']:
            if rest.endswith(name) or (': ' + name) in rest:
                first[name].setdefault(pm.group(1), t)
    fields = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', rest))
    for name in ['scheduler caches synced', 'slurm job watcher synced', 'leading: scheduling', 'pass started',
                 'submitted external job', 'labelled', 'job changed', 'bound pods', 'updated pending external job',
                 'background event going out']:
        if name in rest:
            ev[name].append((t - t0, fields))
def q(xs):
    xs = sorted(xs)
    if not xs: return '-'
    return f"n={len(xs)} first={xs[0]:.2f} p50={xs[len(xs)//2]:.2f} p90={xs[int(len(xs)*.9)]:.2f} last={xs[-1]:.2f}"
for k, v in ev.items():
    print(f"{k:32s} {q([t for t,_ in v])}")
sub = {f['job_id']: t for t, f in ev['submitted external job']}
lab = {f['job_id']: t for t, f in ev['labelled']}
run = {}
for t, f in ev['job changed']:
    if 'Running' in f.get('state', '') or 'RUNNING' in f.get('state', '').upper():
        run.setdefault(f['job_id'], t)
bnd = {f['job_id']: t for t, f in ev['bound pods']}
def lat(a, b, name):
    d = [b[j] - a[j] for j in a if j in b]
    if d: print(f"{name:32s} mean={statistics.mean(d):.3f} p50={sorted(d)[len(d)//2]:.3f} p99={sorted(d)[int(len(d)*.99)]:.3f} max={max(d):.3f} n={len(d)}")
lat(sub, lab, 'submit -> labelled')
lat(sub, run, 'submit -> RUNNING seen')
lat(run, bnd, 'RUNNING seen -> bound')
lat(sub, bnd, 'submit -> bound')
# per-second rates (Scheduled Events: when each went out, after giving way to the binds)
evs = {i: t for i, (t, _) in enumerate(ev['background event going out'])}
for name, d in [('submits', sub), ('seen running', run), ('bound', bnd), ('events', evs)]:
    h = collections.Counter(int(t) for t in d.values())
    print(f"{name:14s}/s:", ' '.join(f"{h.get(i,0)}" for i in range(0, int(max(d.values(), default=0)) + 1)))
expired = sum(1 for _, f in ev['background event going out'] if f.get('lag_expired') == 'true')
if evs: print(f"events that waited their longest (EVENT_MAX_LAG): {expired} of {len(evs)}")

if len(sys.argv) > 2:
    created, boundat = {}, {}
    for line in open(sys.argv[2]):
        name, c, b = line.split()
        key = 'default/' + name
        created[key] = float(c)
        if b != '-': boundat[key] = float(b)
    phases = [('created', created)] + [(n, first[n]) for n in
              ['pod watch event', 'new pod queued', 'pod handed out', 'pass started', 'submitted external job']] + [('bound (bench watch)', boundat)]
    print('per pod (first of each):')
    for (an, a), (bn, b) in zip(phases, phases[1:]):
        lat(a, b, f"{an} -> {bn}"[:48])
    lat(created, first['pass started'], 'created -> first pass')
    lat(created, boundat, 'created -> bound')
    lo = min(created.values())
    for name, d in [('created', created), ('watch events', first['pod watch event']), ('first passes', first['pass started'])]:
        h = collections.Counter(int(t - lo) for k, t in d.items() if k in created)
        print(f"{name:14s}/s:", ' '.join(f"{h.get(i,0)}" for i in range(0, max(h, default=0) + 1)))
