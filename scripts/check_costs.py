"""Rewrite xgrad/testing/check_costs.json, the measured seconds of each case of
``python -m xgrad check`` that ``--shard`` and ``--jobs`` balance by, from
the JSON report of an unsharded run on native:0:

    python -m xgrad check --no-progress --json full.json
    python scripts/check_costs.py full.json [--machine "2-core VM"]

A case run with several seeds (``--repeat``) gets its median. Cases missing
from the table (new ops) are estimated from their op's other entries (see
``xgrad.testing._driver.estimate_costs``), so the table needs rewriting only
when the costs have shifted a lot; shards of one CI run must use one table
(one xgrad version), which ``--merge`` checks.
"""

import argparse
import json
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
TABLE = os.path.join(HERE, '..', 'xgrad', 'testing', 'check_costs.json')


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('report', help='JSON report of python -m xgrad check (unsharded)')
    p.add_argument('--machine', default='', help='where it was measured (recorded)')
    p.add_argument('--out', default=TABLE, help='default: %(default)s')
    args = p.parse_args()
    with open(args.report, encoding='utf-8') as f:
        report = json.load(f)
    if report.get('shard'):
        p.error('{} is the report of one shard; measure an unsharded run'.format(args.report))
    times = {}
    for c in report['cases']:
        if c['device'] != 'native:0':
            continue
        key = '{}[{}]-{}-order{}'.format(c['op'], c['sample'], c['dtype'], c['order'])
        times.setdefault(key, []).append(c['seconds'])
    table = {
        'what': 'seconds per case of python -m xgrad check on native:0, measured once; '
                'the cost --shard and --jobs balance by (scripts/check_costs.py)',
        'machine': args.machine,
        'date': report.get('date'),
        'xgrad_version': report.get('xgrad_version'),
        'numpy_version': report.get('numpy_version'),
        'python': report.get('python'),
        'total_s': round(sum(statistics.median(v) for v in times.values()), 3),
        'seconds': {k: round(statistics.median(v), 5) for k, v in sorted(times.items())},
    }
    text = json.dumps({k: v for k, v in table.items() if k != 'seconds'}, indent=1,
                      sort_keys=True)[:-2]
    # One entry per line: diffs of the table stay readable.
    text += ',\n "seconds": {\n' + ',\n'.join(
        '  {}: {}'.format(json.dumps(k), v) for k, v in table['seconds'].items()) + '\n }\n}\n'
    json.loads(text)
    with open(args.out, 'w', encoding='utf-8') as f:
        f.write(text)
    print('{}: {} cases, {:.1f} s in all'.format(args.out, len(table['seconds']),
                                                 table['total_s']))


if __name__ == '__main__':
    main()
