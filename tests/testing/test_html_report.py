"""``python -m xgrad check --html``: one self-contained page with the
summary, the ops x orders x dtypes table coloured by worst relative error,
every failing case with its message and its error-against-step plot, flaky
cases marked; written from a run or a merge; opened in a real headless
browser where one is installed."""

import json
import os
import pathlib
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib

import numpy
import pytest

import xgrad
from xgrad.testing import OpInfo, Sample, register
from xgrad.testing import _cli, _html

from ._user_modules import clean_user_ops  # NOQA: F401 (fixture)

SCREENSHOT = pathlib.Path('/tmp/xgrad_report.png')


class _Square(xgrad.FunctionNode):
    """y = x**2 with the gradient 2x where x < 0.7, 2.4x above: wrong only
    for some draws (flaky), or always with ``always``."""

    def __init__(self, always=False):
        super().__init__()
        self.always = always

    def forward(self, inputs):
        self.retain_inputs((0,))
        return numpy.square(inputs[0]),

    def backward(self, targets, gys):
        x, = self.get_retained_inputs()
        wrong = x * 2.4
        if not self.always:
            wrong = xgrad.where(x < 0.7, x * 2, wrong)
        return gys[0] * wrong,


def _ops():
    # coarse_step: a right gradient checked with too large a step (a V).
    register(OpInfo('coarse_step', lambda x: xgrad.sin(x * 3), samples=[Sample((3,))],
                    dtypes=['float64'], eps={'float64': 0.1}, twice_differentiable=False),
             OpInfo('flaky_square', lambda x: _Square().apply([x])[0],
                    samples=[Sample((3,))], dtypes=['float32', 'float64']),
             OpInfo('wrong_square', lambda x: _Square(True).apply([x])[0],
                    samples=[Sample((2, 2))], dtypes=['float64']),
             OpInfo('softsign', lambda x: x / (1 + x * x), samples=[Sample((3,))]),
             package='report')


def _html_of(argv, capsys, tmp_path, name='r.html'):
    path = tmp_path / name
    code = _cli.main(argv + ['--html', str(path), '--no-progress'])
    capsys.readouterr()
    return code, path.read_text()


@pytest.fixture
def page(clean_user_ops, capsys, tmp_path):
    _ops()
    code, text = _html_of(['--ops', 'report,tanh', '--repeat', '6', '--json',
                           str(tmp_path / 'r.json')], capsys, tmp_path)
    assert code == 1
    return text, json.loads((tmp_path / 'r.json').read_text())


def test_page_holds_summary_table_failures_and_plots(page):
    text, report = page
    s = report['summary']
    assert '<b>{} cases of 5 ops: {} passed, {} failed</b>'.format(
        s['cases'], s['passed'], s['failed']) in text
    assert 'FAILED' in text
    # The table: a row per op, a column per order and dtype present.
    for op in ('report::coarse_step', 'report::flaky_square', 'report::wrong_square',
               'report::softsign', 'tanh'):
        assert '<th>{}</th>'.format(op) in text
    for col in ('order 1<br>float16', 'order 2<br>float64'):
        assert col in text
    failing = [c for c in report['cases'] if c['status'] != 'passed']
    assert text.count('<div class="case">') == len(failing)
    # Every failing case has its plot: the curve, the tolerance and the check's step.
    assert text.count('<svg') == len(failing) == sum('step_curve' in c for c in failing)
    assert text.count('tolerance (rtol') == len(failing)
    assert 'check step' in text
    # Flaky: failed for some of the six seeds only.
    flaky = re.findall(r'flaky: failed (\d) of 6 seeds', text)
    assert flaky and all(0 < int(n) < 6 for n in flaky)
    assert 'wrong gradient: the error stays above the tolerance' in text
    assert 'step too large: truncation error at step 1e-01' in text
    # each SVG is well-formed XML
    for svg in re.findall(r'<svg.*?</svg>', text, re.S):
        ET.fromstring(svg)


def test_page_is_self_contained(page):
    text, _ = page
    assert '<script' not in text and '<link' not in text and '<img' not in text
    assert 'url(' not in text and '@import' not in text
    # The only URL is the SVG namespace (a name, never fetched).
    assert set(re.findall(r'https?://[^\s"\'<>]+', text)) == {'http://www.w3.org/2000/svg'}


def test_passing_run_page(capsys, tmp_path):
    code, text = _html_of(['--ops', 'tanh,exp'], capsys, tmp_path)
    assert code == 0
    assert 'PASSED' in text and '<svg' not in text and 'Failing cases' not in text
    assert text.count('<td class="" style="background:#') == 2 * 3 * 2


def test_merge_writes_the_page_of_the_whole_run(clean_user_ops, capsys, tmp_path):
    _ops()
    args = ['--ops', 'report', '--repeat', '2']
    _html_of(args + ['--json', str(tmp_path / 'all.json')], capsys, tmp_path, 'all.html')
    paths = []
    for k in (1, 2):
        paths.append(str(tmp_path / 's{}.json'.format(k)))
        _cli.main(args + ['--shard', '{}/2'.format(k), '--json', paths[-1], '--no-progress'])
    code, merged = _html_of(['--merge'] + paths, capsys, tmp_path, 'merged.html')
    assert code == 1
    whole = (tmp_path / 'all.html').read_text()

    def body(text):  # all but the header (times, dates, shard counts)
        return text[text.index('<h2>'):]

    assert body(merged) == body(whole)


def test_colour_scale():
    assert _html.colour(0.0) == _html.colour(1e-30) == '#2e8b57'
    assert _html.colour(1.0) == _html.colour(float('inf')) == '#c82828'
    assert _html.colour(1e-8) != _html.colour(1e-3)


# ---------------------------------------------------------------------------
# In a real browser

def _browser():
    for name in ('chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable'):
        found = shutil.which(name)
        if found:
            return found
    return None


def _png_pixels(data):
    """(width, height, rows of RGBA tuples) of an 8-bit RGB(A) PNG, as
    Chromium writes screenshots (enough of PNG for that; no PIL needed)."""
    assert data[:8] == b'\x89PNG\r\n\x1a\n'
    pos, idat, header = 8, b'', None
    while pos < len(data):
        length, kind = struct.unpack('>I4s', data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b'IHDR':
            header = struct.unpack('>IIBBBBB', chunk)
        elif kind == b'IDAT':
            idat += chunk
        pos += 12 + length
    width, height, depth, colour_type, _, _, interlace = header
    assert depth == 8 and colour_type in (2, 6) and interlace == 0, header
    n = 4 if colour_type == 6 else 3
    raw = zlib.decompress(idat)
    stride = width * n
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - n] if i >= n else 0
            b = prev[i]
            c = prev[i - n] if i >= n else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc
                                      else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, n, rows


def _has_colour(rows, n, rgb, tolerance=12):
    for row in rows:
        for i in range(0, len(row), n):
            if all(abs(row[i + k] - rgb[k]) <= tolerance for k in range(3)):
                return True
    return False


@pytest.mark.skipif(_browser() is None, reason='no Chromium or Chrome on this machine (apt-get '
                                               'install chromium) to open the report in')
def test_report_in_a_headless_browser(page, tmp_path):
    """Chromium parses the page into the DOM we wrote (every plot an SVG
    element) and draws it: the screenshot (kept at /tmp/xgrad_report.png)
    shows the red FAILED badge, the plots' blue curves and the table's
    colours."""
    text, report = page
    path = tmp_path / 'report.html'
    path.write_text(text)
    browser = _browser()
    flags = [browser, '--headless', '--no-sandbox', '--disable-gpu', '--hide-scrollbars',
             '--user-data-dir={}'.format(tmp_path / 'profile')]
    env = dict(os.environ, HOME=str(tmp_path))
    dom = subprocess.run(flags + ['--dump-dom', path.as_uri()], capture_output=True,
                         text=True, timeout=120, env=env)
    assert dom.returncode == 0, dom.stderr[-2000:]
    failing = sum(c['status'] != 'passed' for c in report['cases'])
    assert dom.stdout.count('<svg') == failing
    assert dom.stdout.count('<polyline') >= failing
    assert 'xgrad gradient check' in dom.stdout
    shot = tmp_path / 'shot.png'
    proc = subprocess.run(flags + ['--window-size=1280,2000', '--screenshot={}'.format(shot),
                                   path.as_uri()], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-2000:]
    data = shot.read_bytes()
    SCREENSHOT.write_bytes(data)
    width, height, n, rows = _png_pixels(data)
    assert (width, height) == (1280, 2000)
    assert _has_colour(rows, n, (0xc6, 0x36, 0x2f))  # the FAILED badge
    assert _has_colour(rows, n, (0x2b, 0x5f, 0xad))  # a plot's curve
    assert _has_colour(rows, n, (0x2e, 0x8b, 0x57), tolerance=30)  # a green cell
