"""pyklog's schema registry: Confluent Schema Registry's REST API over a compacted ``_schemas`` topic.

One module per part (docs/schema-registry.md is the user's guide):

* :mod:`.main` -- ``pyklog-schema-registry``: the composition root and the process;
* :mod:`.config` -- the settings, by Confluent's names;
* :mod:`.app` -- the HTTP routes (aiohttp), forwarding of writes, basic authentication;
* :mod:`.registry` -- the state (subjects, versions, ids, levels) and its operations;
* :mod:`.store` -- the topic's record format and the thread that reads it;
* :mod:`.election` -- the primary, elected in a group of protocol type ``sr``;
* :mod:`.compatibility`, :mod:`.avro`, :mod:`.json_schema`, :mod:`.protobuf` -- schema types and
  their compatibility rules;
* :mod:`.errors` -- Confluent's error codes;
* :mod:`.client`, :mod:`.wire` -- the client side: a cached REST client, the wire format codec;
* :mod:`.process` -- a registry child process (tests, the demo).
"""
