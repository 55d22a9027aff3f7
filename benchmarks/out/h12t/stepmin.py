import sys,re,glob,collections
# stepmin.py DIR: per-step minimum over each config's rounds; sums by step shape
d=sys.argv[1]
res={}
for x in 'AB':
    best={}; shape={}
    for f in sorted(glob.glob(f'{d}/{x}_*.txt')):
        for line in open(f):
            m=re.match(r'idk_profile step +(\d+) op +\d+ kind +(\d+) (\S+).*\(fastest ([0-9.]+)\) (.*)',line)
            if m:
                s=int(m.group(1)); v=float(m.group(4))
                best[s]=min(best.get(s,1e9),v); shape[s]=m.group(2)+' '+m.group(5)
    res[x]=(best,shape)
ba,sa=res['A']; bb,sb=res['B']
print('sum of per-step minima over rounds: A %.3f B %.3f ms' % (sum(ba.values()), sum(bb.values())))
ga=collections.defaultdict(float); gb=collections.defaultdict(float); n=collections.Counter()
for s in ba:
    if s in bb and sa[s]==sb[s]:
        ga[sa[s]]+=ba[s]; gb[sa[s]]+=bb[s]; n[sa[s]]+=1
for k in sorted(ga,key=lambda k:-ga[k])[:10]:
    print('%3d x %-80s A %8.3f B %8.3f  B/A %.3f' % (n[k],k[:80],ga[k],gb[k],gb[k]/ga[k]))
