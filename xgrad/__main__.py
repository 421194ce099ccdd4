"""``python -m xgrad check ...``: see ``xgrad/testing/_cli.py``;
``python -m xgrad info``: see ``xgrad/_info.py``."""

import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ('-h', '--help'):
        print('usage: python -m xgrad check [options]   (python -m xgrad check --help)\n'
              '       python -m xgrad info              (versions, GPUs, kernels)')
        return 0 if argv else 2
    if argv[0] == 'info':
        from xgrad._info import main as info
        return info(argv[1:])
    if argv[0] != 'check':
        print('python -m xgrad: unknown command {!r}; the commands are: check, info'
              .format(argv[0]), file=sys.stderr)
        return 2
    from xgrad.testing._cli import main as check
    return check(argv[1:])


if __name__ == '__main__':
    sys.exit(main())
