"""AReaL: its real PPO/GRPO actor losses and advantage code as a ``loss_fn`` (:mod:`.loss`)."""
