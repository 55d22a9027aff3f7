#!/usr/bin/env python3
"""ortshapes.py JSON...: ORT's per-node profile (bin/ortprof output) summed per op type and
(output shape, second-input shape): fastest run of each node, summed over nodes."""
import collections, json, sys
best = {}
info = {}
for jf in sys.argv[1:]:
    for e in json.load(open(jf)):
        if e.get('cat') != 'Node' or not e['name'].endswith('_kernel_time'):
            continue
        name, args = e['name'][:-len('_kernel_time')], e['args']
        outs = args.get('output_type_shape') or [{}]
        ins = [list(x.values())[0] for x in args.get('input_type_shape', [])]
        od = list(outs[0].values())[0] if outs[0] else []
        info[name] = (args.get('op_name'), 'x'.join(map(str, od)), ' '.join('x'.join(map(str, i)) for i in ins[1:]))
        best[name] = min(best.get(name, 1e18), e['dur'] / 1e3)
agg = collections.defaultdict(lambda: [0, 0.0])
for n, ms in best.items():
    a = agg[info[n]]
    a[0] += 1
    a[1] += ms
for k, (c, ms) in sorted(agg.items(), key=lambda x: -x[1][1]):
    print('%-14s out %-14s in2.. %-30s n %3d  sum %8.3f ms  each %.3f' % (k[0], k[1], k[2], c, ms, ms / c))
print('total %.3f ms' % sum(best.values()))
