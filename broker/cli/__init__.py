"""Command-line tools of the broker side: ``pyklog-topics``' ZooKeeper mode (:mod:`.topics`).

The conventions every tool shares (usage errors, ``--version``, exit codes) are in
:mod:`pyklog.broker.common.cli`.
"""
