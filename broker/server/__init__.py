"""The broker process: socket server (:mod:`.network`), request handlers (:mod:`.apis`),
configuration (:mod:`.config`), delayed fetches (:mod:`.purgatory`) and ``main`` (:mod:`.main`)."""
