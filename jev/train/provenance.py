"""Facts about the code a model was trained with, for the provenance file written beside it."""

import subprocess
from pathlib import Path


def git_commit() -> str | None:
    """The commit of the checkout Jev runs from, with `+dirty` if files changed; None outside git."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if status.strip() else "")
