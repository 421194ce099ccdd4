"""Write bench/results/README.md, the index of the recorded results, from the
files in bench/results/ and bench/results/sources.json.

    python bench/results_index.py            # (re)write bench/results/README.md
    python bench/results_index.py --check    # exit 1 if README.md is not what the files give
    python bench/results_index.py --merge OUT --part LABEL SWEEP [RERUN ...] [--part ...]
        # one file of sweeps (conv_sweep.py) or models.py runs with their reruns

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

``--merge`` writes the one file that stands for a sweep and its reruns
(several slices of one benchmark, CPU path and thread setting may go into
one file, each a ``--part``): every point at its latest timing, a point that
a rerun timed again carrying the rerun's figures, with the earlier ones in
its ``earlier`` list; each part's files, dates, commands and commits in
``parts``. SWEEP and RERUN are paths or ``REV:bench/results/FILE`` (read
with ``git show``, so a merge can be redone after the inputs left the tree);
what an input does not record is taken from sources.json at the same REV.

CI's ``docs`` step runs ``--check``: add or remove a result, then run this
script and commit README.md with it.
"""

import argparse
import difflib
import glob
import json
import os
import re
import shlex
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


def summarize_merged_sweep(data):
    """Per part: its points, at or below torch in the sweep's own run and at the
    latest timing of each point (the reruns'), median and worst."""
    texts = []
    for index, part in enumerate(data['parts']):
        for key, label in (('conv', ''), ('pool', ' pooling')):
            rows = [r for r in data.get(key, []) if r.get('part') == index]
            if not rows:
                continue
            latest = [_ratio(r) for r in rows]
            first = [_ratio(r['earlier'][0]) if r.get('earlier') else _ratio(r) for r in rows]
            texts.append('{}: {} points{}, {} at or below torch in one run, {} after the '
                         'reruns, median {:.2f}x, worst {:.2f}x'.format(
                             part['label'], len(rows), label, sum(r <= 1.0 for r in first),
                             sum(r <= 1.0 for r in latest), statistics.median(latest),
                             max(latest)))
    return '; '.join(texts)


def summarize_conv_sweep(data, reruns):
    if data.get('parts'):
        return summarize_merged_sweep(data)
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


def summarize_chainer_examples(data):
    """scripts/chainer_examples.py's timing runs: native:0 over @numpy, per example."""
    out = []
    for label, key in (('one thread', 'one_thread_paired_ratio_median'),
                       ('default threads', 'default_threads_paired_ratio_median')):
        ratios = ['{} {:.2f}x'.format(example, v[key]) for example, v in data['verdict'].items()
                  if isinstance(v, dict) and v.get(key) is not None]
        if ratios:
            out.append('{}: {}'.format(label, ', '.join(ratios)))
    return ('native:0 over @numpy per iteration, median paired ratio, ' + '; '.join(out)
            if out else None)


def summarize_op_sweep(data):
    cases = data.get('cases') or []
    if not cases:
        return None
    ratios = sorted((c['xgrad_over_torch'], c['case']) for c in cases)
    return '{} ops and layers: {} at or below torch, median {:.2f}x, worst {:.2f}x ({})'.format(
        len(ratios), sum(r <= 1.0 for r, _ in ratios), statistics.median(r for r, _ in ratios),
        ratios[-1][0], ratios[-1][1])


def summarize(name, data, reruns):
    if not isinstance(data, dict):
        return None
    if name.startswith('chainer_examples') and isinstance(data.get('verdict'), dict):
        return summarize_chainer_examples(data)
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
    if name.startswith('op_sweep'):
        return summarize_op_sweep(data)
    return None


# -- merging a sweep with its reruns -------------------------------------------

_TIMING_KEYS = ('xgrad_us', 'torch_us', 'ratio', 'paired_ratio', 'load',  # conv_sweep.py
                'xgrad_ms', 'torch_ms', 'xgrad_over_torch', 'ratio_of_medians',  # models.py
                'paired_ratio_range', 'load_average_1min')


def _read_ref(ref):
    """The JSON at a path, or at ``REV:path`` in git; with that REV (or None)."""
    rev, sep, path = ref.partition(':')
    if sep and not os.path.exists(ref):
        import subprocess
        text = subprocess.check_output(['git', 'show', ref], cwd=os.path.dirname(BENCH))
        return json.loads(text), rev, path
    with open(ref) as f:
        return json.load(f), None, ref


def _sources_at(rev):
    if rev is None:
        return _load_json(SOURCES) or {}
    import subprocess
    try:
        text = subprocess.check_output(
            ['git', 'show', rev + ':bench/results/sources.json'],
            cwd=os.path.dirname(BENCH), stderr=subprocess.DEVNULL)
    except subprocess.CalledProcessError:
        return {}
    return json.loads(text)


def _provenance(ref):
    data, rev, path = _read_ref(ref)
    name = os.path.basename(path)
    entry = _sources_at(rev).get('files', {}).get(name, {})
    commit = _commit(data) or entry.get('commit')
    if not commit:
        m = re.search(r'_([0-9a-f]{7})_\d{4}-', name)
        commit = m.group(1) + ' (from the file name)' if m else NOT_RECORDED
    rerun = (data.get('settings') or {}).get('rerun')
    command = data.get('command') or entry.get('command')
    if not command:
        command = NOT_RECORDED + (
            '; a rerun of {}'.format(rerun['of']) if rerun else '')
    where = ' (in git at {})'.format(rev) if rev else ''
    prov = {'file': name + where, 'date': data.get('date'), 'command': command,
            'commit': commit}
    for key in ('settings', 'summary', 'sgemm_gflops_large', 'seconds', 'pruned', 'machine',
                'wall_s'):
        if key in data:
            prov[key] = data[key]
    return data, prov


def _retime(row, new, source, first_source):
    earlier = row.pop('earlier', [])
    earlier.append(dict({k: row[k] for k in _TIMING_KEYS if k in row},
                        timed_by=row.get('timed_by', first_source)))
    out = dict(new, timed_by=source, earlier=earlier)
    out.pop('part', None)
    return out


def merge(parts, command, out_path):
    """One result of several (label, sweep, reruns) parts; see the module's doc."""
    out, prov_parts, conv, pool, confs = None, [], [], [], []
    dates = []
    for index, (label, refs) in enumerate(parts):
        base, base_prov = _provenance(refs[0])
        reruns = [_provenance(r) for r in refs[1:]]
        reruns.sort(key=lambda dp: dp[0].get('date', ''))
        prov_parts.append({'label': label, 'sweep': base_prov,
                           'reruns': [p for _, p in reruns]})
        dates += [d.get('date', '') for d, _ in [(base, None)] + reruns]
        if out is None:
            out = {k: base[k] for k in ('machine', 'threads', 'torch_threads', 'blas_threads',
                                        'versions') if k in base}
        elif base.get('threads') != out.get('threads'):
            raise SystemExit('merge: {} has threads {!r}, the first part {!r}'.format(
                refs[0], base.get('threads'), out.get('threads')))
        if 'configurations' in base:  # bench/models.py: entries by (threads, model)
            for conf in base['configurations']:
                conf = dict(conf, entries=[dict(e, part=index)
                                           for e in conf['entries']])
                confs.append(conf)
            for rerun, prov in reruns:
                for rconf in rerun['configurations']:
                    conf = next(c for c in confs if c['threads'] == rconf['threads'])
                    for e in rconf['entries']:
                        at = [i for i, old in enumerate(conf['entries'])
                              if old['model'] == e['model']]
                        if not at:
                            raise SystemExit('merge: {} times {}, which {} does not'.format(
                                prov['file'], e['model'], base_prov['file']))
                        retimed = _retime(conf['entries'][at[0]], e, prov['file'],
                                          base_prov['file'])
                        conf['entries'][at[0]] = dict(retimed, part=index)
                        if e['model'] in rconf.get('workloads', {}):
                            conf['workloads'] = dict(conf.get('workloads', {}))
                            conf['workloads'][e['model']] = rconf['workloads'][e['model']]
            continue
        keyed = {}
        for key, rows in (('conv', conv), ('pool', pool)):
            for r in base.get(key, []):
                rows.append(dict(r, part=index))
                keyed[(key, _row_key(key, r))] = (rows, len(rows) - 1)
        for rerun, prov in reruns:
            for key in ('conv', 'pool'):
                for r in rerun.get(key, []):
                    where = keyed.get((key, _row_key(key, r)))
                    if where is None:
                        raise SystemExit('merge: {} times a point {} does not: {}'.format(
                            prov['file'], base_prov['file'], _row_key(key, r)))
                    rows, i = where
                    rows[i] = dict(_retime(rows[i], r, prov['file'], base_prov['file']),
                                   part=index)
    commits = []
    for p in prov_parts:
        for c in [p['sweep']['commit']] + [r['commit'] for r in p['reruns']]:
            c = c.split(' ')[0]
            if c not in commits:
                commits.append(c)
    out['versions'] = {k: v for k, v in out.get('versions', {}).items()
                       if k != 'xgrad_commit'}  # each part's: parts[]
    out.update({
        'date': max(dates),
        'command': command,
        'commit': ', '.join(commits),
        'merged': {
            'by': 'python bench/results_index.py --merge {} --command {} {}'.format(
                os.path.relpath(out_path, os.path.dirname(BENCH)), shlex.quote(command),
                ' '.join('--part {} {}'.format(label, ' '.join(refs))
                         for label, refs in parts)),
            'rule': 'each point at its latest timing: a point a rerun timed again has the '
                    'rerun\'s figures and names it (timed_by), its earlier timings in its '
                    '"earlier" list; the other points are as their part\'s first file '
                    '(the sweep) timed them',
        },
        'parts': prov_parts,
    })
    if confs:
        out['configurations'] = confs
    else:
        out['conv'], out['pool'] = conv, pool
    return out


def _row_key(key, row):
    if key == 'conv':
        return _point(row)
    return tuple(row.get(k) for k in ('op', 'batch', 'channels', 'size', 'kernel', 'stride',
                                       'pad'))


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
    ap.add_argument('--merge', metavar='OUT',
                    help='write one result of the --part inputs to OUT (see above)')
    ap.add_argument('--part', nargs='+', action='append', metavar='LABEL SWEEP [RERUN ...]',
                    help='with --merge: a part\'s label, its sweep and its reruns')
    ap.add_argument('--command', default=None,
                    help='with --merge: the command that measures the merged result')
    args = ap.parse_args(argv)
    if args.merge:
        if not args.part or any(len(p) < 2 for p in args.part):
            ap.error('--merge needs at least one --part LABEL SWEEP [RERUN ...]')
        merged = merge([(p[0], p[1:]) for p in args.part], args.command or NOT_RECORDED,
                       os.path.abspath(args.merge))
        with open(args.merge, 'w') as f:
            json.dump(merged, f, indent=1)
            f.write('\n')
        print('wrote', os.path.relpath(args.merge))
        return 0
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
