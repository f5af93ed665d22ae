"""Every benchmarks/results file named in the repository exists, and every file there is named somewhere.

    python3 scripts/check_results_links.py

Names are read from `benchmarks/results/NAME` paths anywhere and from bare names inside the results' summaries;
`{a,b}` and `[x]` expand, `*` matches. A name marked `NAME`† was removed on purpose (the summary says where it went).
Exits 1 if a named file is missing; files no one names are listed, not failed (README names some summaries bare).
"""
import itertools, os, re, subprocess, sys
os.chdir(subprocess.check_output(['git', 'rev-parse', '--show-toplevel']).decode().strip())
files = [f for f in subprocess.check_output(['git', 'ls-files']).decode().split('\n') if f]
res = {os.path.basename(f) for f in files if f.startswith('benchmarks/results/')}
def expand(tok):
    parts = re.split(r'(\{[^}]*\}|\[[^\]]*\])', tok)
    opts = []
    for p in parts:
        if p.startswith('{'): opts.append(p[1:-1].split(','))
        elif p.startswith('['): opts.append(['', p[1:-1]])
        else: opts.append([p])
    return [''.join(c) for c in itertools.product(*opts)]
bad = 0; cited = set()
name = r'[A-Za-z0-9_{},\[\]*.-]+\.(?:json|txt|csv|patch|md)'
for f in files:
    if f.endswith(('.png', '.lock', '.csv', '.patch', '.json')): continue
    try: t = open(f).read()
    except Exception: continue
    toks = [m.group(1) for m in re.finditer(r'benchmarks/results/(' + name + ')', t)]
    if f.startswith('benchmarks/results/'):
        toks += [m.group(1) for m in re.finditer(r'`(' + name + r')`(?!†)', t)]
        toks += [m.group(0) for m in re.finditer(r'(?<![/\w.`-])(?:gemm|attention|host-cost|rowwise|tune|descriptors|nbval|gpu-tests|sass|compile|dispatch|interp)[A-Za-z0-9_.-]*\.(?:json|txt|csv|patch|md)', t)]
    for tok in toks:
        for e in expand(tok):
            if '*' in e:
                if not any(re.fullmatch(e.replace('.', r'\.').replace('*', '.*'), r) for r in res):
                    print(f'{f}: {tok}: no match'); bad += 1
                else: cited |= {r for r in res if re.fullmatch(e.replace('.', r'\.').replace('*', '.*'), r)}
            elif e not in res and not e.startswith('$'):
                print(f'{f}: {tok}: missing'); bad += 1
            else: cited.add(e)
for r in sorted(res - cited):
    print('not cited:', r)
sys.exit(1 if bad else 0)
