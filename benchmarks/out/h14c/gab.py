#!/usr/bin/env python3
# alternating processes, IDK_PROFILE=2: per setting, sum over fn_gconv steps (kind 1, C) of
# the per-run mean and of the fastest, and the whole run's min/p50/mean
import os, re, subprocess, sys, json
model, batch, rounds, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sets = [("dynamic", {}), ("static", {"IDK_GCONV_DYNAMIC": "0"})]
st = re.compile(r'idk_profile step\s+\d+ op\s+\d+ kind\s+1 C\s+(?:1t)?\s*([\d.]+) ms \(fastest ([\d.]+)\)')
tot = re.compile(r'idk_profile: \d+ runs, ([\d.]+) ms per run in steps \(sum of each step.s fastest: ([\d.]+)')
path = os.path.expanduser('~/.cache/idunno/ortbench/%s.onnx' % model)
for r in range(rounds):
    for name, e in (sets if r % 2 == 0 else sets[::-1]):
        p = subprocess.run(['/work/h14c/bin/idunno', 'bench', 'kernel', '--model', path, '--batch', batch, '--threads', '2', '--seconds', secs, '--json'],
                           capture_output=True, text=True, env=dict(os.environ, IDK_PROFILE='2', **e), check=True)
        d = json.loads(p.stdout)
        g = st.findall(p.stderr); t = tot.search(p.stderr)
        print("round %d %-8s load %s: gconv %d steps mean %.3f fastest %.3f ms | all steps mean %s fastest %s | run min %.2f p50 %.2f ips %.2f" % (
            r, name, open('/proc/loadavg').read().split()[0], len(g), sum(float(a) for a, b in g), sum(float(b) for a, b in g),
            t.group(1), t.group(2), d['min_ms'], d['p50_ms'], d['images_per_sec']), flush=True)
