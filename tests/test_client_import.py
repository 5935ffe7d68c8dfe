"""The client imports where torch (and the model, and the server) cannot be imported."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import sys
sys.modules["torch"] = None          # any `import torch` now raises ImportError
import jev
from jev.client import AsyncClient, Client
if "Client" in jev._EXPORTS:
    from jev import AsyncClient, Client
from schemas.mail import MailDecision
client = Client("http://127.0.0.1:9")
client.close()
assert "torch" not in [m for m in sys.modules if sys.modules[m] is not None]
assert not any(m.startswith(("litestar", "jev.decide", "jev.generate", "jev.model")) for m in sys.modules)
print("ok")
"""


def test_client_imports_without_torch_or_the_server():
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
