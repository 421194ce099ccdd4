"""``python -m xgrad check`` run exactly as README.md writes it, the way
users and CI servers run it: in a terminal, piped, and with stdin closed.

Each test runs the full check (every op, about 15 s) with no option added:
the command is taken from README.md itself, so the README and the tests
cannot drift apart. Every CLI test elsewhere passes ``--no-progress``; these
are the ones that exercise the progress display."""

import os
import pathlib
import re
import shlex
import subprocess
import sys
import threading

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / 'README.md'
# Generous: the check takes ~15 s alone, several times that on a busy CI box.
TIMEOUT = 900


def readme_check_command():
    """The main job's command as README.md's "The two commands" gives it."""
    text = README.read_text()
    found = re.search(r'^pip install [^\n]*&& (python -m xgrad check)\s*$', text, re.M)
    assert found, 'README.md no longer gives the main command "... && python -m xgrad check"'
    return found.group(1)


def command_argv():
    argv = shlex.split(readme_check_command())
    assert argv[0] == 'python'
    return [sys.executable] + argv[1:]


SUMMARY = re.compile(r'^(\d+) cases of (\d+) ops: (\d+) passed, 0 failed in [\d.]+ s$', re.M)


def assert_readable_report(stdout):
    """The report is plain text: a summary line saying everything passed,
    with no terminal control characters."""
    found = SUMMARY.search(stdout)
    assert found, stdout[-2000:]
    cases, ops, passed = (int(g) for g in found.groups())
    assert cases == passed > 1000 and ops > 50
    assert '\r' not in stdout and '\x1b' not in stdout
    return cases


def assert_plain_progress(stderr, cases):
    """Off a terminal, progress is a line per 10% and no bar."""
    assert '\r' not in stderr and '\x1b' not in stderr, stderr[-500:]
    assert '|' not in stderr  # no tqdm bar
    assert '100% ({}/{}) failed 0'.format(cases, cases) in stderr, stderr[-500:]


def test_readme_command_in_a_terminal():
    """stdin, stdout and stderr are a pseudo-terminal, as in an interactive
    shell: a progress bar is drawn on it (carriage returns), the report ends
    with the summary, exit code 0."""
    pty = pytest.importorskip('pty')
    master, slave = pty.openpty()
    chunks = []

    def drain():  # read as it comes, or the child blocks on a full pty
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        proc = subprocess.Popen(command_argv(), cwd=ROOT, stdin=slave, stdout=slave,
                                stderr=slave, close_fds=True)
        os.close(slave)
        code = proc.wait(timeout=TIMEOUT)
    finally:
        reader.join(timeout=60)
        os.close(master)
    out = b''.join(chunks).decode('utf-8', 'replace')
    assert code == 0, out[-3000:]
    bar = re.findall(r'\r\s*(\d+)%\|[^\r\n]*\| (\d+)/(\d+) \[', out)
    assert len(bar) >= 2, out[-2000:]
    assert bar[-1][0] == '100' and bar[-1][1] == bar[-1][2]
    # The terminal turns \n into \r\n; the summary still reads as one line.
    text = out.replace('\r\n', '\n')
    found = SUMMARY.search(text)
    assert found and int(found.group(1)) == int(bar[-1][2]), text[-2000:]
    assert '%) failed' not in text  # the plain per-10% lines are for pipes only


def test_readme_command_piped():
    """stdout and stderr are pipes (a CI log, `| tee`): no bar, no carriage
    returns, a progress line per 10% on stderr and the report on stdout."""
    proc = subprocess.run(command_argv(), cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    cases = assert_readable_report(proc.stdout)
    assert_plain_progress(proc.stderr, cases)


def test_readme_command_with_stdin_from_devnull():
    """No input at all (a cron job, `nohup`, a CI step with no terminal)."""
    proc = subprocess.run(command_argv(), cwd=ROOT, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert_plain_progress(proc.stderr, assert_readable_report(proc.stdout))


@pytest.mark.skipif(sys.platform == 'win32', reason='closes a POSIX file descriptor')
def test_readme_command_with_stdin_closed():
    """File descriptor 0 closed (`python -m xgrad check <&-`): Python sets
    sys.stdin to None, and the check must not care."""
    proc = subprocess.run(command_argv(), cwd=ROOT, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=TIMEOUT, preexec_fn=lambda: os.close(0))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert_plain_progress(proc.stderr, assert_readable_report(proc.stdout))


def test_progress_with_no_stderr_at_all():
    """stderr closed too (`2>&-`, or pythonw): the report still comes, with no
    progress and no crash. (A cheap run: one op.)"""
    proc = subprocess.run(command_argv() + ['--ops', 'tanh'], cwd=ROOT,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True, timeout=TIMEOUT,
                          preexec_fn=lambda: (os.close(0), os.close(2)))
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert re.search(r'cases of 1 ops: \d+ passed, 0 failed', proc.stdout), proc.stdout


def test_without_tqdm_a_terminal_gets_the_plain_lines(monkeypatch):
    """tqdm draws the bar on a terminal only: where it is not installed
    (xgrad run from a source tree without its dependencies) the check
    prints the plain progress lines there instead of failing."""
    from xgrad.testing import _cli
    monkeypatch.setitem(sys.modules, 'tqdm', None)  # import tqdm: ImportError

    class Result:
        passed = True

        class case:
            op = 'tanh'

    class Terminal:
        text = ''

        def isatty(self):
            return True

        def write(self, s):
            self.text += s

        def flush(self):
            pass

    stream = Terminal()
    p = _cli.Progress(2, stream=stream)
    assert p.bar is None
    p.update(Result)
    p.update(Result)
    p.close()
    assert stream.text.endswith('100% (2/2) failed 0, 0 s\n')


def test_progress_object_on_streams_without_isatty():
    """The Progress class itself: no stream (sys.stderr is None), a stream
    without isatty, a closed file: plain lines or nothing, never an error."""
    import io
    from xgrad.testing import _cli

    class Result:
        passed = True

        class case:
            op = 'tanh'

    saved = sys.stderr
    try:
        sys.stderr = None
        p = _cli.Progress(3)
        for _ in range(3):
            p.update(Result)
        p.close()
    finally:
        sys.stderr = saved

    class NoIsatty:
        def __init__(self):
            self.text = ''

        def write(self, s):
            self.text += s

        def flush(self):
            pass

    stream = NoIsatty()
    p = _cli.Progress(2, stream=stream)
    p.update(Result)
    p.update(Result)
    p.close()
    assert stream.text.endswith('100% (2/2) failed 0, 0 s\n')

    closed = io.StringIO()
    closed.close()
    assert not _cli._is_terminal(closed)
