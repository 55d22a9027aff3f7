#!/usr/bin/env python3
"""kinds.py LINEUP.txt: a lineup.py output summed per kind of layer, ops ORT matched only."""
import re, sys, collections
rows = collections.OrderedDict()
first = True
for line in open(sys.argv[1]):
    m = re.match(r'op\s+(\d+) kind (\d+)\s+(\S+)\s+(\S*)\s+ours\s+([\d.]+)\s+ort\s+(\S+)', line)
    if not m: continue
    op, kind, out, w, ours, ort = m.groups()
    kind = int(kind)
    if kind == 1:
        wd = [int(x) for x in w.split('x')]
        if first: k = 'stem'
        elif wd[1] == 1: k = 'depthwise %dx%d' % (wd[2], wd[3])
        elif wd[2] == 1 and wd[3] == 1: k = '1x1'
        else: k = 'dense %dx%d' % (wd[2], wd[3])
        first = False
    elif kind in (2, 15): k = 'pooling'
    elif kind == 5: k = 'classifier'
    else: k = 'other (kind %d)' % kind
    r = rows.setdefault(k, [0, 0.0, 0.0, 0, 0.0])
    if ort == '-':
        r[3] += 1; r[4] += float(ours); continue
    r[0] += 1; r[1] += float(ours); r[2] += float(ort)
print('| kind | matched ops | ours ms | ORT ms | ours - ORT | unmatched ops (ours ms) |')
print('| --- | --- | --- | --- | --- | --- |')
for k, (n, a, b, un, ua) in rows.items():
    print('| %s | %d | %.3f | %.3f | %+.3f | %s |' % (k, n, a, b, a - b, '%d (%.3f)' % (un, ua) if un else '-'))
