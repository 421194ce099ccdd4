"""Write bench/results/README.md, the index of the recorded results, from the
files in bench/results/ and bench/results/sources.json.

    python bench/results_index.py            # (re)write bench/results/README.md
    python bench/results_index.py --check    # exit 1 if README.md is not what the files give

Each file's date, machine, thread setting, command and commit are read from
the file itself where it records them (the benchmarks write ``date`` and
``machine``; newer ones ``command`` and ``versions.xgrad_commit``); what a
file does not record comes from its entry in sources.json, which says where
it comes from (the file's name, the index that was kept by hand until
2026-12-06, or the commit that added the file), or the index says "not
recorded". Nothing is filled in by guessing. The headline numbers of each
row are computed from the file (a conv sweep together with the reruns of its
points above torch). A file without an entry in sources.json (e.g. a new
``models_*`` result) is listed with what it records itself.

CI's ``docs`` step runs ``--check``: add or remove a result, then run this
script and commit README.md with it.
"""

import argparse
import difflib
import glob
import json
import os
import re
import statistics
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(BENCH, 'results')
INDEX = os.path.join(RESULTS, 'README.md')
SOURCES = os.path.join(RESULTS, 'sources.json')
NOT_RECORDED = 'not recorded'


def _load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _date(name, data):
    if isinstance(data, dict) and isinstance(data.get('date'), str):
        return data['date'][:16].replace('T', ' ')
    m = re.search(r'(\d{4}-\d{2}-\d{2})(?:_(\d{2})(\d{2}))?', name)
    if m:
        return m.group(1) + (' {}:{}'.format(m.group(2), m.group(3)) if m.group(2) else '')
    return None


def _machine(data):
    """The machine as the file records it, or None."""
    m = data.get('machine') if isinstance(data, dict) else None
    if isinstance(m, str):
        return m
    if not isinstance(m, dict):
        return None
    cpus = m.get('usable_cpus') or m.get('cpu_count')
    parts = ['{}, {} CPUs'.format(m.get('cpu_model', '?'), cpus)]
    if m.get('vector_extensions') is not None:
        parts.append('+'.join(m['vector_extensions']) or 'no AVX2')
    if m.get('xgrad_cpu_path'):
        parts.append('xgrad path ' + m['xgrad_cpu_path'])
    return ', '.join(parts)


def _threads(data):
    if not isinstance(data, dict):
        return None
    t = data.get('threads')
    if isinstance(t, dict):  # per framework or per library
        t = t.get('xgrad') or t.get('OMP_NUM_THREADS')
    if t is None:
        t = data.get('omp_num_threads')
    if t in ('default', 0):
        return 'default'
    return t


def _commit(data):
    if not isinstance(data, dict):
        return None
    versions = data.get('versions') if isinstance(data.get('versions'), dict) else {}
    return versions.get('xgrad_commit') or data.get('commit')


# -- headline numbers, by kind of file ---------------------------------------------

def _point(row):
    return tuple(row.get(k) for k in ('op', 'batch', 'in_channels', 'out_channels', 'size',
                                       'kernel', 'stride'))


def _ratio(row):
    """xgrad over torch at one point: the median of the per-round ratios (what
    ``conv_sweep.py --rerun`` selects on), else the ratio of the medians."""
    return row.get('paired_ratio') or row['ratio']


def _sweep_rows(data, key, reruns):
    """The sweep's ratios, each point's replaced by its latest rerun's."""
    ratios = {_point(r): _ratio(r) for r in data.get(key, [])}
    for rerun in sorted(reruns, key=lambda d: d.get('date', '')):
        for r in rerun.get(key, []):
            if _point(r) in ratios:
                ratios[_point(r)] = _ratio(r)
    return list(ratios.values())


def _sweep_text(ratios, label):
    if not ratios:
        return None
    return '{} {} points: {} at or below torch, median {:.2f}x, worst {:.2f}x'.format(
        len(ratios), label, sum(r <= 1.0 for r in ratios), statistics.median(ratios),
        max(ratios))


def summarize_conv_sweep(data, reruns):
    if (data.get('settings') or {}).get('rerun'):
        of = data['settings']['rerun'].get('of')
        rows = data.get('conv', []) + data.get('pool', [])
        return 'times again the {} point{} of `{}` above torch there: {} at or below ' \
               'torch now'.format(len(rows), '' if len(rows) == 1 else 's', of,
                                  sum(_ratio(r) <= 1.0 for r in rows))
    texts = []
    for key, label in (('conv', 'conv/conv_transpose'), ('pool', 'pooling')):
        single = [_ratio(r) for r in data.get(key, [])]
        if not single:
            continue
        text = _sweep_text(single, label)
        if reruns and any(rr.get(key) for rr in reruns):
            combined = _sweep_rows(data, key, reruns)
            text += '; with the reruns {} at or below, worst {:.2f}x'.format(
                sum(r <= 1.0 for r in combined), max(combined))
        texts.append(text)
    return '; '.join(texts)


def summarize_run(data):
    out = []
    for name, b in data.get('benchmarks', {}).items():
        t = b.get('time_us') or {}
        anchor = (b.get('target') or {}).get('anchor')
        if 'xgrad' in t and anchor in t:
            out.append('{} {:.2f}x {}'.format(name, t['xgrad'] / t[anchor], anchor))
    return 'xgrad over the target\'s anchor: ' + ', '.join(out) if out else None


def summarize_training_steps(data):
    out = []
    for c in data.get('configurations', []):
        threads = 'one thread' if c.get('threads') == 1 else 'default threads'
        ratios = ', '.join('{} {:.2f}x'.format(k, w['ratio'])
                           for k, w in c.get('workloads', {}).items() if 'ratio' in w)
        out.append('{}: {}'.format(threads, ratios))
    return 'xgrad over torch, ' + '; '.join(out) if out else None


def summarize_op_overhead(data):
    s = data.get('summary') or {}
    if 'median_ratio' not in s:
        return None
    worst = ', '.join('{} {:.2f}'.format(w['op'], w['ratio']) for w in s.get('worst', [])[:3])
    return 'median xgrad/torch {:.2f} over {} ops with a torch counterpart, {} above 0.6 ' \
           '(highest: {})'.format(s['median_ratio'], s.get('ops_with_torch'),
                                   s.get('ops_above_worst_target'), worst)


def summarize_gemm_shapes(data):
    rows = data.get('rows') or []
    own = [r['own_gflops'] for r in rows if r.get('own_gflops')]
    blas = [r['blas_gflops'] for r in rows if r.get('blas_gflops')]
    if not own:
        return None
    return '{} products of conv shapes: xgrad\'s GEMM {:.0f}-{:.0f} GFLOP/s, the BLAS ' \
           '{:.0f}-{:.0f}'.format(len(rows), min(own), max(own), min(blas), max(blas))


def summarize(name, data, reruns):
    if not isinstance(data, dict):
        return None
    if name.startswith('conv_sweep'):
        return summarize_conv_sweep(data, reruns)
    if 'benchmarks' in data and 'frameworks' in data:
        return summarize_run(data)
    if 'configurations' in data:
        return summarize_training_steps(data)
    if name.startswith('op_overhead'):
        return summarize_op_overhead(data)
    if name.startswith('gemm_shapes'):
        return summarize_gemm_shapes(data)
    return None


# -- the index ---------------------------------------------------------------------

def _cell(text):
    return str(text).replace('|', '\\|').replace('\n', ' ')


def _companion(name, names):
    """A markdown table written beside a JSON of the same stem."""
    stem, ext = os.path.splitext(name)
    return ext == '.md' and stem + '.json' in names


def build():
    sources = _load_json(SOURCES) or {}
    entries = sources.get('files', {})
    machines = sources.get('machines', {})
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(RESULTS, '*'))
                   if os.path.isfile(p))
    names = [n for n in names if n not in ('README.md', 'sources.json')]
    problems = ['sources.json names {}, which is not in bench/results'.format(n)
                for n in entries if n not in names]
    datas = {n: _load_json(os.path.join(RESULTS, n)) for n in names if n.endswith('.json')}
    reruns = {}
    for n, d in datas.items():
        of = ((d or {}).get('settings') or {}).get('rerun') if isinstance(d, dict) else None
        if of and of.get('of') in datas:
            reruns.setdefault(of['of'], []).append(d)

    groups = {}
    for name in names:
        if _companion(name, names):
            continue
        e = entries.get(name, {})
        data = datas.get(name)
        machine_id = e.get('machine')
        recorded = _machine(data)
        m = machines.get(machine_id, {})
        machine = recorded or m.get('short')
        if machine and 'xgrad path' not in (recorded or ''):
            machine += ' (' + m.get('unrecorded', 'not recorded in the file') + ')'
        command = (data.get('command') if isinstance(data, dict) else None) or e.get('command')
        commit = _commit(data) or e.get('commit')
        row = {
            'file': name,
            'machine': machine or NOT_RECORDED,
            'companions': [n for n in names if _companion(n, names)
                           and os.path.splitext(n)[0] == os.path.splitext(name)[0]],
            'benchmark': e.get('benchmark') or name.split('_20')[0],
            'threads': _threads(data) or e.get('threads') or NOT_RECORDED,
            'date': _date(name, data) or e.get('date') or NOT_RECORDED,
            'command': command or NOT_RECORDED,
            'commit': commit or NOT_RECORDED,
            'found': summarize(name, data, reruns.get(name, [])) or e.get('found') or '',
            'notes': e.get('notes', ''),
        }
        groups.setdefault(machine_id or 'other', []).append(row)

    lines = [
        '# Recorded results',
        '',
        '<!-- Generated by `python bench/results_index.py` from the files here and',
        'sources.json; do not edit by hand (CI\'s docs step runs it with --check). -->',
        '',
        sources.get('intro', '').strip(),
        '',
    ]
    order = list(machines) + sorted(set(groups) - set(machines))
    for machine_id in order:
        rows = groups.get(machine_id)
        if not rows:
            continue
        m = machines.get(machine_id, {})
        lines += ['## ' + m.get('title', 'Other files'), '']
        if m.get('about'):
            lines += [m['about'].strip(), '']
        lines += ['| file | benchmark | threads | what it found | command | commit | date |',
                  '| --- | --- | --- | --- | --- | --- | --- |']
        for r in sorted(rows, key=lambda r: (r['benchmark'], r['file'])):
            files = ', '.join('`{}`'.format(f) for f in [r['file']] + r['companions'])
            found = r['found'] + ('; ' + r['notes'] if r['notes'] and r['found'] else r['notes'])
            lines.append('| {} | {} | {} | {} | {} | {} | {} |'.format(
                files, _cell(r['benchmark']), _cell(r['threads']), _cell(found),
                _cell('`{}`'.format(r['command']) if r['command'] != NOT_RECORDED
                      else NOT_RECORDED),
                _cell(r['commit']), _cell(r['date'])))
        machines_seen = sorted({r['machine'] for r in rows})
        lines += ['', 'The machine as the files give it: ' + '; '.join(
            _cell(x) for x in machines_seen) + '.', '']
    return '\n'.join(lines).rstrip() + '\n', problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--check', action='store_true',
                    help='exit 1 if bench/results/README.md is not what this script writes')
    args = ap.parse_args(argv)
    text, problems = build()
    for p in problems:
        print('results_index: ' + p, file=sys.stderr)
    if args.check:
        try:
            with open(INDEX) as f:
                current = f.read()
        except OSError:
            current = ''
        if current != text:
            sys.stdout.writelines(difflib.unified_diff(
                current.splitlines(True), text.splitlines(True), 'README.md (committed)',
                'README.md (from the files)'))
            print('bench/results/README.md is stale: run python bench/results_index.py',
                  file=sys.stderr)
            return 1
        return 1 if problems else 0
    with open(INDEX, 'w') as f:
        f.write(text)
    print('wrote', os.path.relpath(INDEX))
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
