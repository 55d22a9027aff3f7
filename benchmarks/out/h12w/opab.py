#!/usr/bin/env python3
"""per-op A/B: alternates IDK_PROFILE=2 bench kernel runs of A and B settings; prints per-op
fastest (sum of its steps' fastest, min over rounds), totals, whole-run minima.
usage: h12w_opab.py MODEL BATCH ROUNDS SECONDS NAME=BIN:ENV1,ENV2 NAME=BIN:ENV ..."""
import collections, json, os, re, subprocess, sys, tempfile, time
STEP = re.compile(r'idk_profile step\s+\d+ op\s+(\d+) kind\s+(\d+) .*?\(fastest ([\d.]+)\) out (\S+)(?: in (\S+)(?: (\S+))?)?')
model, batch, rounds, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sides = []
for a in sys.argv[5:]:
    name, rest = a.split('=', 1)
    b, _, envs = rest.partition(':')
    env = dict(os.environ, IDK_PROFILE='2')
    for e in filter(None, envs.split(',')):
        k, v = e.split('=', 1); env[k] = v
    lib = os.path.join(os.path.dirname(b), 'libidunno_kernel.so')
    env['IDUNNO_KERNEL_LIB'] = lib
    sides.append((name, b, env))
best = {n: {} for n, _, _ in sides}
mins = collections.defaultdict(list)
print('# %s UTC load %s model %s batch %s' % (time.strftime('%H:%M:%S', time.gmtime()), open('/proc/loadavg').read().split()[:3], model, batch))
for r in range(rounds):
    for name, b, env in sides:
        p = subprocess.run([b, 'bench', 'kernel', '--model', os.path.expanduser('~/.cache/idunno/ortbench/%s.onnx' % model),
                            '--batch', batch, '--threads', '2', '--seconds', secs, '--json'], capture_output=True, text=True, env=env)
        d = json.loads(p.stdout)
        mins[name].append(d['min_ms'])
        ops = collections.OrderedDict()
        # split plans print one table per part: keep per (part, op)
        part = 0; seen = set()
        for line in p.stderr.splitlines():
            if line.startswith('idk_profile:') and 'runs' in line and 'per run' in line:
                part += 1
            m = STEP.match(line)
            if not m: continue
            key = (part, int(m.group(1)))
            ops.setdefault(key, [m.group(4), m.group(6) or '', 0.0])[2] += float(m.group(3))
        for k, (o, w, ms) in ops.items():
            if k not in best[name] or ms < best[name][k][2]:
                best[name][k] = [o, w, ms]
        print('round %d %s min %.2f p50 %.2f load %s' % (r + 1, name, d['min_ms'], d['p50_ms'], open('/proc/loadavg').read().split()[0]), flush=True)
names = [n for n, _, _ in sides]
keys = list(best[names[0]].keys())
for k in keys:
    vals = [best[n].get(k, ['', '', float('nan')])[2] for n in names]
    o, w = best[names[0]][k][:2]
    print('part %d op %4d %-18s %-14s ' % (k[0], k[1], o, w) + ' '.join('%8.3f' % v for v in vals))
for n in names:
    extra = set(best[n]) - set(keys)
    for k in extra:
        print('only in %s: part %d op %d %s %.3f' % (n, k[0], k[1], best[n][k][0], best[n][k][2]))
print('sum of per-op fastest: ' + ' '.join('%s %.3f' % (n, sum(v[2] for v in best[n].values())) for n in names))
print('whole-run minima: ' + ' | '.join('%s %s' % (n, ' '.join('%.2f' % x for x in mins[n])) for n in names))
