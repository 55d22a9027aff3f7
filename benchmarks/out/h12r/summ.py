import sys, json, re, collections
# min ms per (model, prec, mode) over rounds; prints split/def ratio
d = collections.defaultdict(list); hdr = []
for fn in sys.argv[1:]:
    for line in open(fn):
        if line.startswith('#'): hdr.append(fn.split('/')[-1] + ' ' + line.strip()); continue
        m = re.match(r'round=(\d+) model=(\S+) prec=(\S+) mode=(\S+) (.*)', line)
        if not m: continue
        try: j = json.loads(m.group(5))
        except Exception: print('ERR', line.strip()[:200]); continue
        d[(m.group(2), m.group(3), m.group(4))].append(j['min_ms'])
for h in hdr: print(h)
print('| model | prec | default min ms | split min ms | split/default | runs |')
print('|---|---|---:|---:|---:|---|')
seen = []
for (mo, p, mode) in d:
    if (mo, p) not in seen: seen.append((mo, p))
for mo, p in seen:
    a, b = d.get((mo, p, 'def'), []), d.get((mo, p, 'split'), [])
    if not a or not b: continue
    print(f'| {mo} | {p} | {min(a):.2f} | {min(b):.2f} | {min(b)/min(a):.3f} | {" ".join(f"{x:.2f}" for x in a)} / {" ".join(f"{x:.2f}" for x in b)} |')
