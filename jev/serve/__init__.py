"""The decision service: a litestar app built from a decider folder, with dynamic batching.

    from jev.serve.app import create_app
    app = create_app("models/default", ServeSettings(max_batch=32))

Nothing is imported here, so `jev` commands that do not serve never load litestar.
"""
