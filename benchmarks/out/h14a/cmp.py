import re,sys,glob
def load(pat):
    best={}
    for f in glob.glob(pat):
        cur={}
        for l in open(f):
            m=re.match(r'idk_profile step +(\d+) op +(\d+) kind +(\d+) .*\(fastest ([\d.]+)\) out (\S+)',l)
            if m:
                op=int(m.group(2)); v=float(m.group(4))
                cur.setdefault(op,[0,m.group(5)]); cur[op][0]+=v
        for op,(v,sh) in cur.items():
            best.setdefault(op,[v,sh]); best[op][0]=min(best[op][0],v)
    return best
cols=[(p,int(b)) for p,b in (a.split(':') for a in sys.argv[1:])]
ds=[load(p) for p,_ in cols]
ops=sorted(set().union(*[d.keys() for d in ds]))
tot=[0]*len(ds)
for op in ops:
    row=[]
    for i,(d,(p,b)) in enumerate(zip(ds,cols)):
        if op in d: v=d[op][0]*4/b; tot[i]+=v; row.append('%7.3f'%v)
        else: row.append('      -')
    shp=next(d[op][1] for d in ds if op in d)
    print('%3d %-18s'%(op,shp),' '.join(row))
print('tot (per 4 images)',' '.join('%7.3f'%t for t in tot))
