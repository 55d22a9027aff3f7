#!/usr/bin/env python3
"""lineup.py: IDunno's and ONNX Runtime's per-layer times side by side (batch 1 unless --batch).

Runs, alternately for ROUNDS rounds of SECONDS each, `idunno bench kernel` with
IDK_PROFILE=2 (every plan step's fastest run, with shapes) and bin/ortprof (ORT's per-node
profile, the same session options as bench.js), then lines the layers up: each of our ops
(the sum of its steps' fastest runs, reorders into its layouts included) against the ORT
node with the same output and weight shapes (the k-th of ours with a shape against ORT's
k-th). Per layer and step, the fastest over all rounds: on a shared machine the minimum is
what other load disturbs least. ORT's fused nodes (Conv with its Add and Relu) and ours
(convolution post-ops) match one to one on convolutional networks; other ops are summed per
ORT op type at the end.

usage: python3 benchmarks/ort/lineup.py --model resnet50 [--batch 1] [--threads 2] [--rounds 3]
       [--seconds 3] [--csv out.csv] [--env IDK_X=1 ...]
(make bin/idunno bin/libidunno_kernel.so bin/ortprof first; the models are the ones
benchmarks/ort exports to ~/.cache/idunno/ortbench.)
"""
import argparse
import collections
import csv
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ORTLIB = os.path.join(HERE, 'node_modules', 'onnxruntime-node', 'bin', 'napi-v3', 'linux', 'x64',
                      'libonnxruntime.so.1.20.1')
STEP = re.compile(r'idk_profile step\s+\d+ op\s+(\d+) kind\s+(\d+) .*?\(fastest ([\d.]+)\) out (\S+)(?: in (\S+)(?: (\S+))?)?')


def ours_ops(path):
    """op index -> [key (out dims, weight dims), fastest ms (sum over its steps), kind]"""
    ops = collections.OrderedDict()
    for line in open(path):
        m = STEP.match(line)
        if not m:
            continue
        op, kind, ms, out = int(m.group(1)), m.group(2), float(m.group(3)), m.group(4)
        w = (m.group(6) or '').lstrip('c') if (m.group(6) or '').startswith('c') else ''
        ops.setdefault(op, [(out, w), 0.0, kind])[1] += ms
    return ops


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--model', required=True)
    ap.add_argument('--batch', type=int, default=1)
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--seconds', type=float, default=3)
    ap.add_argument('--csv')
    ap.add_argument('--env', nargs='*', default=[], help='NAME=VALUE for our side (A/B)')
    a = ap.parse_args()
    model = os.path.expanduser('~/.cache/idunno/ortbench/%s.onnx' % a.model)
    size = 299 if 'inception_v3' in a.model else 224
    if a.model == 'transformer_encoder':  # token ids and a mask, 128 long (bench.js's textInputs)
        size = 'ids128'
    env = dict(os.environ, IDK_PROFILE='2', **dict(e.split('=', 1) for e in a.env))
    tmp = tempfile.mkdtemp(prefix='lineup-')
    best = collections.OrderedDict()
    ort = collections.defaultdict(list)
    info = {}
    for r in range(a.rounds):
        out = subprocess.run([os.path.join(ROOT, 'bin', 'ortprof'), ORTLIB, model, str(a.batch), str(size), str(a.threads),
                              str(a.seconds), os.path.join(tmp, 'ort%d' % r)], capture_output=True, text=True, check=True)
        print('round %d ort  %s' % (r + 1, out.stdout.strip()), file=sys.stderr)
        with open(os.path.join(tmp, 'ours%d.txt' % r), 'w') as f:
            out = subprocess.run([os.path.join(ROOT, 'bin', 'idunno'), 'bench', 'kernel', '--model', model, '--batch', str(a.batch),
                                  '--threads', str(a.threads), '--seconds', str(a.seconds), '--json'],
                                 stdout=subprocess.PIPE, stderr=f, text=True, env=env, check=True)
        res = json.loads(out.stdout)
        print('round %d ours {"min_ms":%.3f,"p50_ms":%.3f,"runs":%d}' % (r + 1, res['min_ms'], res['p50_ms'], res['runs']),
              file=sys.stderr)
        for op, (key, ms, kind) in ours_ops(os.path.join(tmp, 'ours%d.txt' % r)).items():
            if op not in best or ms < best[op][1]:
                best[op] = [key, ms, kind]
    for jf in sorted(glob.glob(os.path.join(tmp, 'ort*.json'))):
        for e in json.load(open(jf)):
            if e.get('cat') != 'Node' or not e['name'].endswith('_kernel_time'):
                continue
            name, args = e['name'][:-len('_kernel_time')], e['args']
            ort[name].append(e['dur'] / 1e3)
            outs = args.get('output_type_shape') or [{}]
            ins = [list(x.values())[0] for x in args.get('input_type_shape', [])]
            od = list(outs[0].values())[0] if outs[0] else []
            info[name] = (args.get('op_name'), 'x'.join(map(str, od)), 'x'.join(map(str, ins[1])) if len(ins) > 1 else '')
    by_key = collections.defaultdict(list)
    for name, v in ort.items():
        op, o, w = info[name]
        by_key[(o, w)].append((min(v), name))
    used, rows, matched = collections.Counter(), [], set()
    for op, (key, ms, kind) in best.items():
        k = used[key]
        used[key] += 1
        lst = by_key.get(key, [])
        o = lst[k] if k < len(lst) else None
        if o:
            matched.add(o[1])
        rows.append((op, kind, key[0], key[1], ms, o[0] if o else None))
    w = csv.writer(open(a.csv, 'w', newline='')) if a.csv else None
    if w:
        w.writerow(['op', 'kind', 'out', 'weights', 'idunno_ms', 'ort_ms'])
    for op, kind, out, wd, ms, om in rows:
        print('op %4d kind %-3s %-16s %-15s ours %7.3f  ort %s' % (op, kind, out, wd, ms,
              '%7.3f  %+.3f' % (om, ms - om) if om is not None else '      -'))
        if w:
            w.writerow([op, kind, out, wd, '%.3f' % ms, '%.3f' % om if om is not None else ''])
    rest = collections.Counter()
    for name, v in ort.items():
        if name not in matched:
            rest[info[name][0]] += min(v)
    for op, ms in rest.most_common():
        print('ort unmatched %-20s %7.3f' % (op, ms))
    print('sum of fastest: ours %.3f ms (all ops), ort %.3f ms (all nodes), ort matched %.3f ms' % (
        sum(r[4] for r in rows), sum(min(v) for v in ort.values()), sum(r[5] for r in rows if r[5] is not None)))


if __name__ == '__main__':
    main()
