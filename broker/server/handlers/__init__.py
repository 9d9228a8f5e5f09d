"""The request handler families of the broker, one module per API family (see
:mod:`pyklog.broker.server.apis` for the dispatch and the map of which family serves which API)."""
