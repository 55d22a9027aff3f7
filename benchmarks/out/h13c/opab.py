#!/usr/bin/env python3
"""opab.py: alternating A/B of `idunno bench kernel` settings at one batch, per op.

usage: [THREADS=2] opab.py MODEL BATCH ROUNDS SECONDS NAME=BIN[:ENV=V,ENV=V] ...
Each round runs every setting once (IDK_PROFILE=2; the order reversed every other round), printing its whole-run min and p50 and
the sum of each op's fastest steps; at the end, per setting: the best whole-run min, the sum
of per-op fastest over all rounds, and per op the fastest (ops whose fastest differ by more
than 0.01 ms between settings are listed)."""
import collections, json, os, re, subprocess, sys, time
STEP = re.compile(r'idk_profile step\s+\d+ op\s+(\d+) kind\s+(\d+) .*?\(fastest ([\d.]+)\) out (\S+)(?: in (\S+)(?: (\S+))?)?')
INBEST = re.compile(r'.* inbest ([\d.]+)$')
model, batch, rounds, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sets = []
for a in sys.argv[5:]:
    name, rest = a.split('=', 1)
    b, _, e = rest.partition(':')
    sets.append((name, b, dict(kv.split('=', 1) for kv in e.split(',') if kv)))
path = os.path.expanduser('~/.cache/idunno/ortbench/%s.onnx' % model)
best = {n: {} for n, _, _ in sets}
mins = collections.defaultdict(list)
bestrun = {}
keys = {}
for r in range(rounds):
    for name, b, e in (sets if r % 2 == 0 else sets[::-1]):  # ABBA: no setting always runs first
        env = dict(os.environ, IDK_PROFILE='2', **e)
        p = subprocess.run([b, 'bench', 'kernel', '--model', path, '--batch', batch, '--threads', os.environ.get('THREADS', '2'), '--seconds', secs, '--json'],
                           capture_output=True, text=True, env=env, check=True)
        res = json.loads(p.stdout)
        ops = collections.OrderedDict()
        inb = collections.OrderedDict()
        for line in p.stderr.splitlines():
            m = STEP.match(line)
            if m:
                op = int(m.group(1))
                ops.setdefault(op, 0.0)
                ops[op] += float(m.group(3))
                b = INBEST.match(line)
                inb[op] = inb.get(op, 0.0) + (float(b.group(1)) if b else 0.0)
                keys.setdefault(op, (m.group(4), m.group(6) or ''))
        for op, ms in ops.items():
            if op not in best[name] or ms < best[name][op]:
                best[name][op] = ms
        mins[name].append(res['min_ms'])
        if res['min_ms'] <= min(mins[name]):
            bestrun[name] = (res['min_ms'], dict(ops), dict(inb))
        print('%s round %d %-10s min %8.3f p50 %8.3f sum-of-op-fastest %8.3f load %s' % (
            time.strftime('%H:%M:%S', time.gmtime()), r + 1, name, res['min_ms'], res['p50_ms'], sum(ops.values()),
            open('/proc/loadavg').read().split()[0]), flush=True)
for name, _, _ in sets:
    print('%-10s min over rounds %8.3f  sum of per-op fastest %8.3f  mins %s' % (
        name, min(mins[name]), sum(best[name].values()), ' '.join('%.2f' % m for m in mins[name])))
names = [n for n, _, _ in sets]
allops = sorted(set().union(*[set(best[n]) for n in names]))
for op in allops:
    v = [best[n].get(op) for n in names]
    vv = [x for x in v if x is not None]
    if max(vv) - min(vv) > 0.01 or len(vv) < len(v):
        print('op %4d %-16s %-16s ' % (op, keys[op][0], keys[op][1]) + ' '.join('%8.3f' % x if x is not None else '       -' for x in v))
for name, _, _ in sets:
    m, ops, inb = bestrun[name]
    ex = sorted(((inb[o] - ops[o], o) for o in ops), reverse=True)
    print('%s: fastest run %.3f ms, its steps %.3f, the same round\'s per-op fastest %.3f; largest excess (op: in run - fastest): %s' % (
        name, m, sum(inb.values()), sum(ops.values()), ' '.join('%d:%.3f' % (o, e) for e, o in ex[:12])))
