"""ART (OpenPipe's Agent Reinforcement Trainer): its real loss and packing as a ``loss_fn`` (:mod:`.loss`)."""
