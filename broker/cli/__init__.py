"""Command-line tools of the broker side (``pyklog-topics``)."""
