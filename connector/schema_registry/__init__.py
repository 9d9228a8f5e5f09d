"""pyklog's schema registry: Confluent's Schema Registry REST API over a compacted ``_schemas`` topic."""
