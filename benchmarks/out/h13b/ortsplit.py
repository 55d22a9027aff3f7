#!/usr/bin/env python3
"""ortsplit.py JSON...: ORT's MatMul nodes with one output shape told apart by their fastest
time (the profile shows no weight shapes): a K=3072 product takes ~4x a K=768 one."""
import collections, json, sys
best, shape = {}, {}
for jf in sys.argv[1:]:
    for e in json.load(open(jf)):
        if e.get('cat') != 'Node' or not e['name'].endswith('_kernel_time') or e['args'].get('op_name') != 'MatMul':
            continue
        n = e['name'][:-len('_kernel_time')]
        outs = e['args'].get('output_type_shape') or [{}]
        shape[n] = 'x'.join(map(str, list(outs[0].values())[0])) if outs[0] else ''
        best[n] = min(best.get(n, 1e18), e['dur'] / 1e3)
by = collections.defaultdict(list)
for n, ms in best.items():
    by[shape[n]].append(ms)
for s, v in by.items():
    v.sort()
    lo = [x for x in v if x < 2 * v[0]]
    hi = [x for x in v if x >= 2 * v[0]]
    print('%-16s %2d nodes ~%.3f ms (sum %.3f)' % (s, len(lo), sum(lo) / len(lo), sum(lo)), end='')
    if hi:
        print('; %2d nodes ~%.3f ms (sum %.3f)' % (len(hi), sum(hi) / len(hi), sum(hi)), end='')
    print()
