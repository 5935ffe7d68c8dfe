"""The decision service: a litestar app built from a decider folder, with dynamic batching.

    app = create_app("models/default", ServeSettings(max_batch=32))
"""

from jev.serve.app import create_app
from jev.serve.settings import ServeSettings

__all__ = ["ServeSettings", "create_app"]
