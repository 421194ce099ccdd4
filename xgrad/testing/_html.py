"""``python -m xgrad check --html PATH``: the report as one page a person
reads, from the same dict the JSON report holds (so ``--merge`` writes it
too, from the shards' reports).

One self-contained file: inline CSS, inline SVG, no script, no font, no
request to any server; it opens from a CI artifact or a mail attachment.
It holds the summary, a table of ops x orders x dtypes coloured by the
worst relative error, the failures grouped as the text report groups them,
and every failing case with its message and, where the run measured it
(``--json``/``--html``), the error of the central difference against the
step on a log-log plot beside the tolerance (``_step_curve``).

The plots are SVG written here rather than drawn by a plotting library:
one kind of plot with a dozen points needs about a hundred lines, where
matplotlib would be a dependency of xgrad's test tools (tens of MB, a
font cache built at first use) and its SVG output embeds glyph paths
that make each plot tens of kB.
"""

import collections
import html
import math

# Colour scale of the table: log10 of the worst relative error.
SCALE_LOW, SCALE_HIGH = -16, 0
# Failing cases shown with their message and plot; the rest are counted.
MAX_DETAILS = 200

CSS = '''
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: #1d2330; margin: 24px auto; max-width: 1180px; padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; }
.verdict { display: inline-block; padding: 2px 10px; border-radius: 4px; color: #fff;
           font-weight: 600; margin-right: 8px; }
.pass { background: #2f8f46; } .fail { background: #c6362f; }
.meta { color: #566; font-size: 12.5px; }
table { border-collapse: collapse; font-size: 12.5px; }
th, td { padding: 3px 7px; border: 1px solid #d5d9e0; text-align: left; vertical-align: top; }
th { background: #f2f4f7; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.map td { text-align: center; min-width: 58px; font-variant-numeric: tabular-nums; }
table.map td.bad { outline: 2px solid #b3001b; outline-offset: -2px; font-weight: 700; }
table.map td.none { background: #f7f7f7; color: #aaa; }
.legend { display: flex; align-items: center; gap: 6px; font-size: 12px; margin: 6px 0; }
.legend span.bar { width: 240px; height: 12px; border: 1px solid #ccc;
                   background: linear-gradient(to right, COLOURS); }
.case { border: 1px solid #d5d9e0; border-radius: 6px; padding: 10px 12px; margin: 12px 0;
        display: flex; gap: 16px; flex-wrap: wrap; }
.case .text { flex: 1 1 420px; min-width: 0; }
.case h3 { font-size: 14px; margin: 0 0 4px; word-break: break-all; }
.badge { display: inline-block; font-size: 11px; padding: 0 6px; border-radius: 3px;
         background: #eef; color: #335; margin-right: 4px; }
.badge.flaky { background: #fff1c2; color: #6b4e00; }
.badge.failed, .badge.error { background: #fde0de; color: #8a1c15; }
pre { white-space: pre-wrap; word-break: break-word; background: #f7f8fa; padding: 6px 8px;
      font-size: 12px; margin: 6px 0; max-height: 260px; overflow: auto; }
.diagnosis { font-size: 13px; margin: 6px 0; }
svg text { font: 11px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; fill: #333; }
'''


def _e(text):
    return html.escape(str(text), quote=True)


def _fmt(v):
    if v is None:
        return '-'
    if v == 0:
        return '0'
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return '{:.2g}'.format(v)


# ---------------------------------------------------------------------------
# Colours

_STOPS = [(0.0, (46, 139, 87)), (0.45, (170, 210, 110)), (0.7, (250, 215, 90)),
          (0.85, (245, 150, 60)), (1.0, (200, 40, 40))]


def colour(worst_rel):
    """The table's colour of a worst relative error (log scale from 1e-16,
    green, to 1, red)."""
    if worst_rel is None or not math.isfinite(worst_rel):
        t = 1.0
    elif worst_rel <= 0:
        t = 0.0
    else:
        t = (math.log10(worst_rel) - SCALE_LOW) / (SCALE_HIGH - SCALE_LOW)
        t = min(max(t, 0.0), 1.0)
    for (t0, c0), (t1, c1) in zip(_STOPS, _STOPS[1:]):
        if t <= t1:
            f = (t - t0) / (t1 - t0)
            return '#{:02x}{:02x}{:02x}'.format(*(round(a + (b - a) * f)
                                                  for a, b in zip(c0, c1)))
    return '#c82828'


# ---------------------------------------------------------------------------
# The plot

def curve_svg(curve, width=440, height=270):
    """The error against the step (``_step_curve``) as an inline SVG:
    log-log, the steps growing to the right, the tolerance as a dashed
    horizontal line and the check's step as a dotted vertical one."""
    steps, errors = curve['steps'], curve['errors']
    relative = curve.get('measure', 'relative') == 'relative'
    line = curve['rtol'] if relative else curve['atol']
    left, right, top, bottom = 58, 14, 26, 40
    pw, ph = width - left - right, height - top - bottom
    finite = [e for e in errors if e is not None and e > 0]
    tiny = min(finite + [line]) if finite or line > 0 else 1e-16
    lows = [math.log10(max(v, 1e-300)) for v in finite + ([line] if line > 0 else [])]
    y0 = math.floor(min(lows + [math.log10(max(tiny, 1e-300))])) if lows else -16
    y1 = math.ceil(max(lows)) if lows else 0
    if y1 - y0 < 2:
        y0, y1 = y0 - 1, y1 + 1
    xs = [math.log10(h) for h in steps]
    x0, x1 = math.floor(min(xs)), math.ceil(max(xs))

    def px(lx):
        return left + (lx - x0) / (x1 - x0) * pw

    def py(ly):
        return top + (y1 - ly) / (y1 - y0) * ph

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           'viewBox="0 0 {w} {h}" role="img" aria-label="error of the central difference '
           'against the step">'.format(w=width, h=height),
           '<rect x="{}" y="{}" width="{}" height="{}" fill="#fcfcfd" stroke="#99a"/>'.format(
               left, top, pw, ph)]
    ystep = max(1, math.ceil((y1 - y0) / 8))
    for ly in range(y0, y1 + 1, ystep):
        y = py(ly)
        out.append('<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="#e4e6eb"/>'
                   .format(left, y, left + pw, y))
        out.append('<text x="{:.1f}" y="{:.1f}" text-anchor="end">1e{}</text>'.format(
            left - 5, y + 4, ly))
    for lx in range(x0, x1 + 1):
        x = px(lx)
        out.append('<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="#e4e6eb"/>'
                   .format(x, top, x, top + ph))
        if (lx - x0) % 2 == 0 or x1 - x0 <= 8:
            out.append('<text x="{:.1f}" y="{:.1f}" text-anchor="middle">1e{}</text>'.format(
                x, top + ph + 15, lx))
    out.append('<text x="{:.1f}" y="{:.1f}" text-anchor="middle">step of the central '
               'difference</text>'.format(left + pw / 2, height - 6))
    out.append('<text x="12" y="{:.1f}" text-anchor="middle" transform="rotate(-90 12 {:.1f})">'
               '{} error</text>'.format(top + ph / 2, top + ph / 2,
                                        'relative' if relative else 'absolute'))
    if line > 0:
        y = py(math.log10(line))
        out.append('<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="#c6362f" '
                   'stroke-width="1.5" stroke-dasharray="6 4"/>'.format(left, y, left + pw, y))
        out.append('<text x="{:.1f}" y="{:.1f}" text-anchor="end" fill="#c6362f" '
                   'style="fill:#c6362f">tolerance ({} {})</text>'.format(
                       left + pw - 4, y - 4, 'rtol' if relative else 'atol', _fmt(line)))
    x = px(math.log10(curve['eps']))
    out.append('<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="#d9822b" '
               'stroke-width="1.5" stroke-dasharray="2 3"/>'.format(x, top, x, top + ph))
    anchor = 'end' if x > left + pw - 50 else 'start' if x < left + 50 else 'middle'
    out.append('<text x="{:.1f}" y="{:.1f}" text-anchor="{}" style="fill:#b0651a">'
               'check step {}</text>'.format(x, top - 8, anchor, _fmt(curve['eps'])))
    segment, segments = [], []
    for h, e in zip(steps, errors):
        if e is None:
            if segment:
                segments.append(segment)
            segment = []
            continue
        segment.append((px(math.log10(h)), py(math.log10(max(e, 10.0 ** y0)))))
    if segment:
        segments.append(segment)
    for seg in segments:
        out.append('<polyline fill="none" stroke="#2b5fad" stroke-width="2" points="{}"/>'
                   .format(' '.join('{:.1f},{:.1f}'.format(a, b) for a, b in seg)))
    for h, e in zip(steps, errors):
        if e is None:
            continue
        used = h == curve['eps']
        out.append('<circle cx="{:.1f}" cy="{:.1f}" r="{}" fill="{}" stroke="#fff">'
                   '<title>step {:.0e}: error {:.3g}</title></circle>'.format(
                       px(math.log10(h)), py(math.log10(max(e, 10.0 ** y0))),
                       5 if used else 3.2, '#d9822b' if used else '#2b5fad', h, e))
    out.append('</svg>')
    return ''.join(out)


# ---------------------------------------------------------------------------
# The page

def _case_key(r):
    return (r['op'], r['sample'], r['dtype'], r['device'], r['order'],
            r.get('layout', 'contiguous'))


def _case_name(r):
    name = '{}[{}]-{}-{}-order{}'.format(r['op'], r['sample'], r['dtype'], r['device'],
                                         r['order'])
    return name if 'layout' not in r else '{}-{}'.format(name, r['layout'])


def render(report, groups):
    """The HTML page of ``report`` (the JSON report's dict); ``groups``:
    its failures grouped as the text report groups them (``_cli.summarize``)."""
    records = report['cases']
    failed = [r for r in records if r['status'] != 'passed']
    seeds = collections.defaultdict(lambda: [0, 0])  # case -> [failed, runs]
    for r in records:
        s = seeds[_case_key(r)]
        s[0] += r['status'] != 'passed'
        s[1] += 1
    ops = sorted({r['op'] for r in records})
    parts = ['<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             '<title>{} - xgrad gradient check</title>'.format(
                 'FAILED' if failed else 'passed'),
             '<style>{}</style></head><body>'.format(CSS.replace('COLOURS', ', '.join(
                 colour(10.0 ** (SCALE_LOW + (SCALE_HIGH - SCALE_LOW) * k / 8))
                 for k in range(9))))]
    parts.append(_header(report, records, failed, ops))
    parts.append(_map(records))
    if failed:
        parts.append(_groups(groups))
        parts.append(_details(failed, seeds))
    parts.append('</body></html>\n')
    return '\n'.join(parts)


def _header(report, records, failed, ops):
    summary = report.get('summary', {})
    args = report.get('arguments', {})
    out = ['<h1>xgrad gradient check</h1>',
           '<p><span class="verdict {}">{}</span><b>{} cases of {} ops: {} passed, {} '
           'failed</b> in {:.1f} s</p>'.format(
               'fail' if failed else 'pass', 'FAILED' if failed else 'PASSED',
               summary.get('cases', len(records)), len(ops),
               summary.get('passed', len(records) - len(failed)),
               summary.get('failed', len(failed)), report.get('elapsed_s') or 0.0)]
    meta = [('xgrad', report.get('xgrad_version')), ('NumPy', report.get('numpy_version')),
            ('Python', report.get('python')), ('date', report.get('date'))]
    if report.get('packages'):
        meta.append(('op packages', ', '.join('{} {}'.format(p, v or '')
                                              for p, v in sorted(report['packages'].items()))))
    if report.get('shard'):
        meta.append(('shard', '{}/{}'.format(report['shard']['index'],
                                             report['shard']['count'])))
    if report.get('merged_from'):
        meta.append(('merged from', '{} shard reports'.format(len(report['merged_from']))))
    options = ' '.join('--{} {}'.format(k.replace('_', '-'), ','.join(map(str, v))
                                        if isinstance(v, list) else v)
                       for k, v in args.items() if v not in (None, False, [], ''))
    meta.append(('options', options or '(defaults)'))
    out.append('<p class="meta">{}</p>'.format(' &middot; '.join(
        '{}: {}'.format(_e(k), _e(v)) for k, v in meta if v is not None)))
    return '\n'.join(out)


def _map(records):
    """Ops x (order, dtype) coloured by the worst relative error (over
    samples, seeds and layouts); failing cells outlined."""
    devices = sorted({r['device'] for r in records})
    cols = sorted({(r['order'], r['dtype']) for r in records})
    cells = {}
    for r in records:
        row = (r['op'], r['device']) if len(devices) > 1 else (r['op'],)
        c = cells.setdefault((row, (r['order'], r['dtype'])), [0.0, 0, 0])
        if r['status'] == 'passed' or r['status'] == 'failed':
            c[0] = max(c[0], r['worst_rel'] if r['worst_rel'] is not None else 0.0)
        if r['status'] == 'error':
            c[0] = float('inf')
        c[1] += r['status'] != 'passed'
        c[2] += 1
    rows = sorted({k[0] for k in cells})
    out = ['<h2>Worst relative error by op, order and dtype</h2>',
           '<div class="legend">1e{}<span class="bar"></span>1e{} (and above); '
           'outlined: a case failed (failed/cases); &#8734;: a case raised</div>'.format(
               SCALE_LOW, SCALE_HIGH),
           '<table class="map"><tr><th>op</th>{}{}</tr>'.format(
               '<th>device</th>' if len(devices) > 1 else '',
               ''.join('<th>order {}<br>{}</th>'.format(o, _e(d)) for o, d in cols))]
    for row in rows:
        tds = []
        for col in cols:
            c = cells.get((row, col))
            if c is None:
                tds.append('<td class="none">&ndash;</td>')
                continue
            worst, bad, n = c
            text = '&#8734;' if worst == float('inf') else _fmt(worst)
            if bad:
                text += ' <small>{}/{}</small>'.format(bad, n)
            tds.append('<td class="{}" style="background:{}" title="{} cases, {} failed, '
                       'worst relative error {}">{}</td>'.format(
                           'bad' if bad else '', colour(worst), n, bad, _fmt(worst), text))
        head = ''.join('<td>{}</td>'.format(_e(v)) for v in row)
        out.append('<tr>{}{}</tr>'.format(head.replace('<td>', '<th>', 1).replace(
            '</td>', '</th>', 1), ''.join(tds)))
    out.append('</table>')
    return '\n'.join(out)


def _groups(groups):
    out = ['<h2>Failures: the worst case of each op, dtype, device and order</h2>',
           '<table><tr><th>op</th><th>dtype</th><th>device</th><th>order</th><th>failed</th>'
           '<th>worst abs</th><th>worst rel</th><th>message</th></tr>']
    for (op, dtype, device, order), (r, count) in groups.items():
        first = (r['message'].strip().splitlines() or [''])[0]
        out.append('<tr><td>{}</td><td>{}</td><td>{}</td><td class="num">{}</td>'
                   '<td class="num">{}</td><td class="num">{}</td><td class="num">{}</td>'
                   '<td>{}</td></tr>'.format(_e(op), _e(dtype), _e(device), order, count,
                                            _fmt(r['worst_abs']), _fmt(r['worst_rel']),
                                            _e(first[:160])))
    out.append('</table>')
    return '\n'.join(out)


def _details(failed, seeds):
    out = ['<h2>Failing cases ({})</h2>'.format(len(failed)),
           '<p class="meta">Each with its message and, where measured, the error of the '
           'central difference against its step at the failed draw: a right gradient '
           'draws a V whose bottom lies below the tolerance; a wrong one a floor above '
           'it at every step; a kink a shelf that drops once the step is smaller than '
           'the distance to it.</p>']
    for r in sorted(failed, key=lambda r: (r['op'], -(r['worst_rel'] or 0)))[:MAX_DETAILS]:
        bad, runs = seeds[_case_key(r)]
        badges = ['<span class="badge {0}">{0}</span>'.format(_e(r['status']))]
        if 0 < bad < runs:
            badges.append('<span class="badge flaky">flaky: failed {} of {} seeds</span>'
                          .format(bad, runs))
        if r.get('snapshot') == 'mismatch':
            badges.append('<span class="badge">golden gradients</span>')
        curve = r.get('step_curve')
        plot = ''
        diagnosis = ''
        if curve and 'errors' in curve:
            plot = '<div>{}</div>'.format(curve_svg(curve))
            diagnosis = '<p class="diagnosis"><b>Error against the step:</b> {}</p>'.format(
                _e(curve.get('diagnosis', '')))
        elif curve and 'error' in curve:
            diagnosis = '<p class="diagnosis">The error against the step could not be ' \
                        'measured: {}</p>'.format(_e(curve['error']))
        out.append(
            '<div class="case"><div class="text"><h3>{}</h3><div>{} seed {} &middot; '
            'worst abs {} &middot; worst rel {} &middot; {} draw{}</div>{}<pre>{}</pre>'
            '</div>{}</div>'.format(
                _e(_case_name(r)), ''.join(badges), r['seed'], _fmt(r['worst_abs']),
                _fmt(r['worst_rel']), r.get('draws', 1), '' if r.get('draws', 1) == 1
                else 's', diagnosis, _e(r['message']), plot))
    if len(failed) > MAX_DETAILS:
        out.append('<p class="meta">{} more failing cases are in the JSON report.</p>'.format(
            len(failed) - MAX_DETAILS))
    return '\n'.join(out)
