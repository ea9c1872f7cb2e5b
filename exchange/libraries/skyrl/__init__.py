"""SkyRL (skyrl-train): its real policy losses and advantage estimators as a ``loss_fn`` (:mod:`.loss`)."""
