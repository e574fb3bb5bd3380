"""Services the loops use, below everything that trains: checkpoints and exact resume, graceful stop,
a run's errors, what a resumed run may change, process settings. Nothing here imports above config
(the layers: docs/architecture.md, kept by tests/test_layering.py)."""
