"""verl: its real policy losses as ``loss_fn`` (:mod:`.loss`) and the loss registration (:mod:`.register`)."""
