"""The web UI: an HTTP API over a logdir's runs and the single-page app that shows them.

``routes`` is the one table of API routes; ``api`` answers them whatever the web framework
(``app``, served by our small threaded HTTP/1.1 server in ``http_server``, and ASGI too;
``tensorboard_plugin`` inside TensorBoard); ``tools`` is the registry of pages; ``store``
loads each run once, in the background, into a ``loaded_run``; ``capture_jobs`` runs the
captures the UI starts.
"""
