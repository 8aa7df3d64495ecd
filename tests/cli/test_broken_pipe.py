"""A command whose reader leaves early (``lilicorr train status RUN | head``) ends quietly with the shell's SIGPIPE
status, not a traceback (``cli.main.main``)."""

import subprocess
import sys

CHILD = """
import argparse, sys
from lilicorr.cli import main as cli

def chatty(args):
    for i in range(200_000):
        print(f"line {i}")
    return 0

class Parser:
    def parse_args(self, argv):
        return argparse.Namespace(func=chatty)

cli.build_parser = lambda: Parser()
sys.exit(cli.main(["status"]))
"""


def test_a_closed_pipe_ends_the_command_without_a_traceback():
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "line 0\n"
    proc.stdout.close()  # what `head -1` does after its line
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err, err
