"""scripts/test.sh as a new user meets it: not root, a package missing."""

import os
import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "test.sh"


def test_test_sh_says_what_to_install_instead_of_dying_on_apt_when_not_root(tmp_path):
    bin_dir = tmp_path / "bin"  # no chromium here, and `id` says a user, not root
    bin_dir.mkdir()
    for tool in ("dirname",):
        os.symlink(shutil.which(tool), bin_dir / tool)
    (bin_dir / "id").write_text("#!/bin/sh\necho 1000\n")
    (bin_dir / "id").chmod(0o755)
    proc = subprocess.run(["/bin/bash", str(SCRIPT)], env={"PATH": str(bin_dir)}, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "missing" in proc.stderr and "chromium" in proc.stderr and "sudo apt-get install" in proc.stderr
    assert "apt-get update" not in proc.stderr and "lock" not in proc.stderr


def test_the_readme_says_how_long_test_sh_takes():
    """A new user who starts it should know it is a quarter of an hour, not a minute."""
    readme = (SCRIPT.parents[1] / "README.md").read_text()
    line = next(line for line in readme.splitlines() if line.startswith("bash scripts/test.sh"))
    assert "~15 min on 2 cores" in line, line
