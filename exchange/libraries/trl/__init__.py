"""TRL: its real GRPO loss as a ``loss_fn`` (:mod:`.loss`) and the training integration (:mod:`.trainer`)."""
