"""Python code run as a process that may not read a file the tests made unreadable (chmod 0): as root, which reads any
file, without the capabilities that let it (setpriv, util-linux); the test is skipped where setpriv is missing."""

import os
import shutil
import subprocess
import sys

import pytest

from tests.support import PROJECT

WITHOUT_READ_OVERRIDE = ["setpriv", "--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search"]


# The code's standard output (the project importable, the environment's variables and `environment` set), its run
# checked to have succeeded.
def output_of_unprivileged(code: str, environment: dict) -> str:
    prefix = WITHOUT_READ_OVERRIDE if os.geteuid() == 0 else []
    if prefix and not shutil.which("setpriv"):
        pytest.skip("root reads any file, and setpriv (util-linux) is not here to drop that")
    result = subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT, env={**os.environ, **environment})
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()
