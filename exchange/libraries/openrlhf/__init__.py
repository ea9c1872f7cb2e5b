"""OpenRLHF: its real policy loss as a ``loss_fn`` (:mod:`.loss`)."""
