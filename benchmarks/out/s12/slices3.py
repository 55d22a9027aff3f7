# slices3.py MODEL BATCH SECONDS [ENV=VAL,...]...: servers "ours" (default env), one "ours" per extra env set, and ORT,
# alternating 0.5 s slices (order rotated), 250 ms idle before each; prints latency quantiles per server
import json, subprocess, sys, time, os, signal, statistics as st
model, batch, total = sys.argv[1], sys.argv[2], float(sys.argv[3])
envsets = sys.argv[4:]
mp = os.path.expanduser('~/.cache/idunno/ortbench/%s.onnx' % model)
servers = []
for es in [''] + envsets:
    env = dict(os.environ)
    for kv in filter(None, es.split(',')):
        k, v = kv.split('=', 1); env[k] = v
    servers.append(('ours ' + (es or 'default'), subprocess.Popen(['/work/main/bin/idunno','bench','kernel','--model',mp,'--batch',batch,'--threads','2','--serve'], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd='/work/main')))
servers.append(('ort', subprocess.Popen(['node','bench.js',mp,batch,'serve','2'], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd='/work/main/benchmarks/ort')))
for n, p in servers: p.stdout.readline()
for n, p in servers: p.send_signal(signal.SIGSTOP)
lat = {n: [] for n, _ in servers}
t0 = time.time(); i = 0
while time.time() - t0 < total:
    k = len(servers)
    for j in range(k):
        n, p = servers[(i + j) % k]
        p.send_signal(signal.SIGCONT)
        time.sleep(0.25)
        p.stdin.write('0.5\n'); p.stdin.flush(); lat[n].extend(json.loads(p.stdout.readline())['lat_ms'])
        p.send_signal(signal.SIGSTOP)
    i += 1
for n, p in servers: p.send_signal(signal.SIGCONT); p.stdin.close(); p.wait()
def q(a):
    a = sorted(a); m = len(a)
    return ' '.join('p%d %6.1f' % (k, a[min(m-1, int(m*k/100))]) for k in (0, 10, 25, 50, 75, 90))
for n, _ in servers:
    a = lat[n]; print('%-40s runs %4d mean %6.1f  %s' % (n, len(a), sum(a)/len(a), q(a)))
