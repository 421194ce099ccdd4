"""The README's tour runs as written and prints what its comments say."""

import contextlib
import io
import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / 'README.md'


def test_readme_tour_prints_what_its_comments_claim():
    text = README.read_text()
    tour = re.findall(r'```python\n(.*?)```', text, re.S)[0]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(tour, str(README), 'exec'), {})
    printed = [line.strip() for line in out.getvalue().splitlines()]
    claimed = re.findall(r'print\(.*\)\s+#.*?(\[[^\]]*\])\s*$', tour, re.M)
    assert len(printed) == len(claimed) == 4
    for got, want in zip(printed, claimed):
        values = [float(v) for v in want.strip('[]').split(',')]
        numbers = [float(v) for v in re.findall(r'-?\d+\.?\d*(?:e-?\d+)?',
                                                got.split('shape=')[0])]
        assert numbers == values, (got, want)
