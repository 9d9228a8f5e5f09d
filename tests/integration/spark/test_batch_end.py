"""The batch-end relay's parsing of progress events (connector/spark/batch_end.py).

End to end (a real query's progress relayed through the JVM listener to a group planner) is
tests/integration/spark/test_group_handover.py::test_stop_after_a_batch_hands_over_nothing_to_read_twice;
these pin the shapes: Spark's ``StreamingQueryProgress.json()`` carries each source's offsets as
JSON values (objects), PySpark's converted event as JSON text."""


def test_the_session_listener_is_the_json_relay(spark):
    # pyklog.register(spark) (conftest) installed it; classic PySpark registers its _jlistener.
    listener = spark._pyklog_batch_end_listener
    assert listener is not None
    j = listener._jlistener
    assert j is listener._jlistener  # one JVM wrapper, so removeListener finds what addListener added
    assert j.getClass().getName().endswith("PythonStreamingQueryListenerWrapper")
