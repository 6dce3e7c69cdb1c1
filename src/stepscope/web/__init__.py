"""The web UI: an HTTP API over a logdir's runs and the single-page app that shows them.

``api`` answers requests whatever the web framework (``app`` serves it with FastAPI,
``tensorboard_plugin`` inside TensorBoard); ``tools`` is the registry of pages; ``store``
loads each run once, in the background, and keeps its results.
"""
